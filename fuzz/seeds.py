#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into fuzz/corpus/<target>/ (run from anywhere).

Sources: the transcript in protocol.md (its C:/S: lines), the Python fixtures of
Tests/ShareSyncWireTests/PythonInteropTests.swift, the record example of protocol.md and records built
here with every field type. Frames are encoded with the Python reference of protocol.md. The files are
committed; run this again only to change the seeds (it replaces the seed_* files).
"""
import base64, json, os, re, zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")
TAIL = b"\x00\x00\xff\xff"
ENCODINGS = ["deflate", "deflate-base64", "plain"]  # FrameEncoding.allCases order: selector % 3


def transcript():
    text = open(os.path.join(ROOT, "protocol.md"), encoding="utf-8").read()
    block = text.split("### Transcript", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    lines = [l for l in block.splitlines() if l.startswith(("C: ", "S: "))]
    return [(l[0], l[3:].encode()) for l in lines]


def python_fixtures():
    text = open(os.path.join(ROOT, "Tests", "ShareSyncWireTests", "PythonInteropTests.swift")).read()
    out = {}
    for name in ["pythonDeflate", "pythonDeflateBase64", "pythonDeflateLevel1", "pythonDeflateBase64Level1"]:
        body = text.split(f"static let {name} = \"\"\"", 1)[1].split('"""', 1)[0]
        lines = [l.strip() for l in body.splitlines()]
        if "Base64" in name:
            out[name] = ("\n".join(lines[1:]) + "\n").encode() if lines[0] == "" else "\n".join(lines).encode()
        else:
            out[name] = bytes.fromhex("".join(l.rstrip("\\") for l in lines))
    return out


def escape(data):
    return data.replace(b"\x1b", b"\x1b\x02").replace(b"\n", b"\x1b\x01")


def encode_stream(payloads, encoding):
    z = zlib.compressobj(1, wbits=-15)
    out = b""
    for p in payloads:
        if encoding == "plain":
            out += p + b"\n"
            continue
        data = (z.compress(p) + z.flush(zlib.Z_SYNC_FLUSH)) if p else TAIL
        data = data[:-4]
        out += (escape(data) if encoding == "deflate" else base64.b64encode(data)) + b"\n"
    return out


def selector(encoding, pipeline, chunk=1):
    for s in range(256):
        if s % 3 == ENCODINGS.index(encoding) and bool(s & 0x80) == pipeline and (not pipeline or ((s >> 2) & 0x1F) + 1 == chunk):
            return s
    for s in range(256):
        if s % 3 == ENCODINGS.index(encoding) and bool(s & 0x80) == pipeline:
            return s


def records_in(value, found):
    if isinstance(value, dict):
        if "recordName" in value and "recordType" in value:
            found.append(value)
        for v in value.values():
            records_in(v, found)
    elif isinstance(value, list):
        for v in value:
            records_in(v, found)


def write(target, name, data):
    directory = os.path.join(CORPUS, target)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "seed_" + name), "wb") as f:
        f.write(data)


def main():
    for target in ["frame", "handshake", "message", "record"]:
        directory = os.path.join(CORPUS, target)
        if os.path.isdir(directory):
            for name in os.listdir(directory):
                if name.startswith("seed_"):
                    os.remove(os.path.join(directory, name))

    lines = transcript()
    frames = [payload for _, payload in lines[2:]]
    client = [payload for side, payload in lines[2:] if side == "C"]
    server = [payload for side, payload in lines[2:] if side == "S"]

    # message: every frame of the transcript, and requests and answers the tests use.
    for i, payload in enumerate(frames):
        write("message", f"transcript_{i:02d}", payload)
    extra = [
        b'{"id":1,"op":"modifyRecords","zoneName":"Topics","saving":[{"recordName":"n","recordType":"Note","fields":{"t":{"value":"x","type":"STRING"}},"changedKeys":["t"]}],"deleting":["old"],"savePolicy":"changedKeys","atomically":false}',
        b'{"id":2,"op":"fetchRecords","zoneName":"Topics","recordNames":["a","b"]}',
        b'{"id":3,"ok":{"records":[{"recordName":"a","recordType":"Note","fields":{}}],"errors":{}}}',
        b'{"id":4,"ok":{"saved":[{"recordName":"a","recordType":"Note","fields":{"n":{"type":"INT64","value":3}}}],"deleted":["b"],"errors":{}}}',
        b'{"id":5,"error":{"code":"serverRecordChanged","message":"changed","recordName":"a","rule":"changeTag","serverRecord":{"recordName":"a","recordType":"Note","fields":{}},"partialErrors":{"b":{"code":"unknownItem","message":"gone"}},"retryAfterSeconds":1.5}}',
        b'{"id":null,"error":{"code":"networkFailure","message":"idle","rule":"idleTimeout"}}',
        b'{"id":6,"op":"ping"}',
        b'{"id":7,"ok":{}}',
    ]
    for i, payload in enumerate(extra):
        write("message", f"extra_{i:02d}", payload)

    # record: the records inside the transcript, protocol.md's example, every field type.
    found = []
    for payload in frames:
        records_in(json.loads(payload), found)
    example = open(os.path.join(ROOT, "protocol.md"), encoding="utf-8").read().split("## Records in JSON", 1)[1]
    example = example.split("```json", 1)[1].split("```", 1)[0]
    found.append(json.loads(example))
    found.append({
        "recordName": "every-type", "recordType": "Note", "recordChangeTag": "7",
        "zoneID": {"zoneName": "Topics", "ownerRecordName": "_861c5add48934dc0bbcf0ec1406315ca"},
        "fields": {
            "s": {"type": "STRING", "value": "Hello\nw\u00f6rld \u2603 \\ \" \U0001F600"},
            "i": {"type": "INT64", "value": -9223372036854775808},
            "d": {"type": "DOUBLE", "value": 2.5e-300},
            "b": {"type": "BOOLEAN", "value": True},
            "t": {"type": "TIMESTAMP", "value": 1700000000123},
            "y": {"type": "BYTES", "value": "AAEC/w=="},
            "r": {"type": "REFERENCE", "value": {"recordName": "topic-1", "action": "DELETE_SELF",
                                                 "zoneID": {"zoneName": "Topics", "ownerRecordName": "__defaultOwner__"}}},
            "l": {"type": "LOCATION", "value": {"latitude": 37.5, "longitude": -122.25}},
            "sl": {"type": "STRING_LIST", "value": ["a", "b"]},
            "il": {"type": "INT64_LIST", "value": [1, -2]},
            "dl": {"type": "DOUBLE_LIST", "value": [0.5, 2.25]},
        },
        "created": {"timestamp": 1700000000000, "userRecordName": "_a1b2"},
        "modified": {"timestamp": 1700000000001, "userRecordName": "_a1b2"},
        "parent": {"recordName": "topic-1"},
        "changedKeys": ["s", "i"], "parentChanged": True,
    })
    seen = set()
    for record in found:
        data = json.dumps(record, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()
        if data not in seen:
            seen.add(data)
            write("record", f"{len(seen):02d}", data)

    # frame: the Python fixtures, and the transcript's frames in each encoding, line by line and in a pipeline.
    fixtures = python_fixtures()
    write("frame", "python_deflate", bytes([selector("deflate", False)]) + fixtures["pythonDeflate"])
    write("frame", "python_deflate_level1", bytes([selector("deflate", True, 7)]) + fixtures["pythonDeflateLevel1"])
    write("frame", "python_base64", bytes([selector("deflate-base64", False)]) + fixtures["pythonDeflateBase64"])
    write("frame", "python_base64_level1", bytes([selector("deflate-base64", True, 3)]) + fixtures["pythonDeflateBase64Level1"])
    for encoding in ENCODINGS:
        for side, payloads in [("client", client), ("server", server)]:
            stream = encode_stream(payloads, encoding)
            write("frame", f"{side}_{encoding}", bytes([selector(encoding, False)]) + stream)
            write("frame", f"{side}_{encoding}_pipeline", bytes([selector(encoding, True, 32)]) + stream)

    # handshake: what a client sends (hello and frames) and what a server answers, in each encoding.
    for encoding in ENCODINGS:
        hello = f"SHARESYNC versions=1 encodings={encoding}\n".encode()
        write("handshake", f"client_{encoding}", hello + encode_stream(client, encoding))
        answer = f"SHARESYNC version=1 encoding={encoding}\n".encode()
        write("handshake", f"server_{encoding}", answer + encode_stream(server[:2], encoding))
    write("handshake", "client_preferences", b"SHARESYNC versions=1,2,999999 encodings=zstd,deflate-base64,deflate,plain future=yes\r\n")
    write("handshake", "refusal", b"SHARESYNC-ERROR unsupportedVersion no common protocol version (client offered 2; server supports 1)\n")
    write("handshake", "http", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")


if __name__ == "__main__":
    main()
