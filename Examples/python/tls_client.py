"""A ShareSync participant in Python's standard library: TLS 1.3 with its own Ed25519 certificate,
ALPN sharesync/1, the owner pinned by the share URL's fingerprint, the handshake line (plain
encoding), hello/challenge/authenticate/welcome, then one request (acceptShare).

    python3 tls_client.py CERT.pem KEY.pem 'sharesync://HOST:PORT/share/TOKEN?owner=FINGERPRINT'

CERT.pem: a self-signed X.509 certificate for the node's Ed25519 key (protocol.md, "Transport
security"); KEY.pem: that key in PKCS #8 PEM. Prints each server message as a JSON line.
"""
import base64, hashlib, json, os, socket, ssl, sys, urllib.parse

# Ed25519 (RFC 8032, section 6 reference code), for the challenge-response.
P = 2**255 - 19
Q = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)

def _add(a, b):
    x = (a[1] - a[0]) * (b[1] - b[0]) % P
    y = (a[1] + a[0]) * (b[1] + b[0]) % P
    c, d = 2 * a[3] * b[3] * D % P, 2 * a[2] * b[2] % P
    e, f, g, h = y - x, d - c, d + c, y + x
    return (e * f % P, g * h % P, f * g % P, e * h % P)

def _mul(s, pt):
    acc = (0, 1, 1, 0)
    while s:
        if s & 1: acc = _add(acc, pt)
        pt, s = _add(pt, pt), s >> 1
    return acc

def _x(y, sign):
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P: x = x * SQRT_M1 % P
    if (x * x - x2) % P or (x == 0 and sign): return None
    return P - x if (x & 1) != sign else x

G_Y = 4 * pow(5, P - 2, P) % P
G = (_x(G_Y, 0), G_Y, 1, _x(G_Y, 0) * G_Y % P)

def _encode(pt):
    zi = pow(pt[2], P - 2, P)
    x, y = pt[0] * zi % P, pt[1] * zi % P
    return (y | (x & 1) << 255).to_bytes(32, "little")

def _decode(b):
    y = int.from_bytes(b, "little")
    sign, y = y >> 255, y & ((1 << 255) - 1)
    x = _x(y, sign) if y < P else None
    return None if x is None else (x, y, 1, x * y % P)

def _h(*parts): return int.from_bytes(hashlib.sha512(b"".join(parts)).digest(), "little") % Q

def public_key(seed):
    h = hashlib.sha512(seed).digest()
    return _encode(_mul(int.from_bytes(h[:32], "little") & (2**254 - 8) | 2**254, G))

def sign(seed, msg):
    h = hashlib.sha512(seed).digest()
    a = int.from_bytes(h[:32], "little") & (2**254 - 8) | 2**254
    r = _h(h[32:], msg)
    big_r = _encode(_mul(r, G))
    return big_r + ((r + _h(big_r, _encode(_mul(a, G)), msg) * a) % Q).to_bytes(32, "little")

def verify(pub, msg, sig):
    a, r = _decode(pub), _decode(sig[:32])
    s = int.from_bytes(sig[32:], "little")
    if a is None or r is None or s >= Q: return False
    lhs, rhs = _mul(s, G), _add(r, _mul(_h(sig[:32], pub, msg), a))
    return (lhs[0] * rhs[2] - rhs[0] * lhs[2]) % P == 0 and (lhs[1] * rhs[2] - rhs[1] * lhs[2]) % P == 0

# The node's key: the last 32 bytes of the PKCS #8 DER of an Ed25519 private key are its seed.
def read_seed(key_pem):
    body = "".join(l for l in open(key_pem).read().splitlines() if not l.startswith("-----"))
    return base64.b64decode(body)[-32:]

# The raw key of an Ed25519 certificate: the 32 bytes after its SubjectPublicKeyInfo header.
SPKI_ED25519 = bytes.fromhex("302a300506032b6570032100")

def certificate_key(der):
    i = der.find(SPKI_ED25519)
    if i < 0: raise SystemExit("the owner's certificate has no Ed25519 key")
    return der[i + len(SPKI_ED25519):i + len(SPKI_ED25519) + 32]

def fingerprint(raw_key): return hashlib.sha256(raw_key).digest()[:16].hex()

def main(cert_pem, key_pem, url):
    parsed = urllib.parse.urlsplit(url)
    owner = urllib.parse.parse_qs(parsed.query)["owner"][0]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # no CA: the owner is pinned by key below
    ctx.load_cert_chain(cert_pem, key_pem)
    ctx.set_alpn_protocols(["sharesync/1"])
    tls = ctx.wrap_socket(socket.create_connection((parsed.hostname, parsed.port), timeout=10))
    if tls.version() != "TLSv1.3" or tls.selected_alpn_protocol() != "sharesync/1":
        raise SystemExit("no TLS 1.3 with ALPN sharesync/1")
    owner_key = certificate_key(tls.getpeercert(binary_form=True))
    if fingerprint(owner_key) != owner:
        raise SystemExit("the owner's certificate key is not the share URL's owner")
    lines = tls.makefile("rb")

    def send(obj): tls.sendall(json.dumps(obj, separators=(",", ":")).encode() + b"\n")
    def receive():
        msg = json.loads(lines.readline())
        print(json.dumps(msg, sort_keys=True), flush=True)
        return msg

    tls.sendall(b"SHARESYNC versions=1 encodings=plain\n")
    if lines.readline() != b"SHARESYNC version=1 encoding=plain\n": raise SystemExit("handshake refused")
    seed = read_seed(key_pem)
    my_key = base64.b64encode(public_key(seed)).decode()
    nonce = base64.b64encode(os.urandom(32)).decode()
    send({"op": "hello", "publicKey": my_key, "nonce": nonce, "displayName": "Python"})
    ch = receive()
    server_proof = f"sharesync-server-v1\n{nonce}\n{ch['nonce']}\n{my_key}".encode()
    if base64.b64decode(ch["publicKey"]) != owner_key or not verify(owner_key, server_proof, base64.b64decode(ch["signature"])):
        raise SystemExit("the owner's challenge does not prove its certificate key")
    proof = f"sharesync-client-v1\n{ch['nonce']}\n{nonce}\n{ch['publicKey']}".encode()
    send({"op": "authenticate", "signature": base64.b64encode(sign(seed, proof)).decode()})
    if receive().get("op") != "welcome": raise SystemExit("not welcome")
    send({"id": 1, "op": "acceptShare", "url": url})
    receive()

if __name__ == "__main__":
    main(*sys.argv[1:4])
