"""ShareSync frame encodings (protocol.md, "Frames"): the reference encoder and decoder, standard
library only. One Encoder and one Decoder per connection direction; a payload is the bytes of one
JSON value. Encoder("deflate").encode(b"{}") on a fresh stream gives aa ae 05 00 0a.
"""
import base64, zlib

TAIL = b"\x00\x00\xff\xff"
MAX_FRAME = 16 * 1024 * 1024

class FrameError(ValueError):
    """A broken rule; code is its name in protocol.md (invalidEncoding, inflateFailed, frameTooLarge)."""
    def __init__(self, code, detail=""):
        super().__init__(code + (": " + detail if detail else ""))
        self.code = code

def escape(data: bytes) -> bytes:
    return data.replace(b"\x1b", b"\x1b\x02").replace(b"\n", b"\x1b\x01")

def unescape(line: bytes) -> bytes:
    out, i = bytearray(), 0
    while i < len(line):
        b = line[i]
        if b == 0x1B:
            nxt = line[i + 1:i + 2]
            if nxt == b"\x01": out.append(0x0A)
            elif nxt == b"\x02": out.append(0x1B)
            else: raise FrameError("invalidEncoding", "bad escape")
            i += 2
        elif b == 0x0A:
            raise FrameError("invalidEncoding", "raw newline")
        else:
            out.append(b); i += 1
    return bytes(out)

def b64decode_strict(line: bytes) -> bytes:
    try:
        data = base64.b64decode(line, validate=True)
    except ValueError:
        raise FrameError("invalidEncoding", "not standard base64")
    if base64.b64encode(data) != line:  # non-zero pad bits, or missing padding
        raise FrameError("invalidEncoding", "not the canonical base64 of its bytes")
    return data

class Encoder:
    """history=None keeps one deflate stream for the whole connection: what a ShareSync node does
    while it sends on at most 16 connections at once. history=4096 is what it does beyond that: each
    frame is compressed by a fresh stream whose dictionary is the last 4 KiB of payload this encoder
    sent, so a frame refers back at most that far. Any receiver reads either."""
    def __init__(self, encoding="deflate", level=1, history=None):  # ShareSync nodes send at level 1
        self.encoding, self.level, self.history, self.sent = encoding, level, history, b""
        self.z = zlib.compressobj(level, zlib.DEFLATED, -15, 5) if history is None else None
    def encode(self, payload: bytes) -> bytes:
        if self.encoding == "plain":
            if b"\n" in payload: raise FrameError("invalidEncoding", "newline in a plain payload")
            return payload + b"\n"
        if not payload:
            data = TAIL
        elif self.z:
            data = self.z.compress(payload) + self.z.flush(zlib.Z_SYNC_FLUSH)
        else:
            z = zlib.compressobj(self.level, zlib.DEFLATED, -15, 5, **({"zdict": self.sent} if self.sent else {}))
            data = z.compress(payload) + z.flush(zlib.Z_SYNC_FLUSH)
            self.sent = (self.sent + payload)[-self.history:]
        assert data.endswith(TAIL)
        data = data[:-4]
        body = escape(data) if self.encoding == "deflate" else base64.b64encode(data)
        return body + b"\n"

class Decoder:
    def __init__(self, encoding="deflate", max_frame=MAX_FRAME):
        self.encoding, self.max = encoding, max_frame
        self.z = zlib.decompressobj(wbits=-15)
    def decode(self, line: bytes) -> bytes:  # one line, without its "\n"
        if self.encoding == "plain":
            if len(line) > self.max: raise FrameError("frameTooLarge")
            return line
        if not line:
            return b""
        data = unescape(line) if self.encoding == "deflate" else b64decode_strict(line)
        try:
            out = self.z.decompress(data + TAIL, self.max + 1)  # stops at the cap
        except zlib.error as error:
            raise FrameError("inflateFailed", str(error))
        if len(out) > self.max or self.z.unconsumed_tail:
            raise FrameError("frameTooLarge")
        if self.z.eof:  # a final block: the stream of a connection never ends
            raise FrameError("inflateFailed", "a final deflate block")
        return out
