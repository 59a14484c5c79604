#!/usr/bin/env python3
"""Writes the seed corpus of each fuzz target (fuzz/corpus/<target>/):
whole, valid exchanges taken from the iperf3 byte captures in
crates/xferlab-core/src/iperf3/captures and from xferlab's own messages,
so mutations start from inputs that reach every state. The xferlab
messages are built around a real result of the current build (its spec,
software and both sides' reports), so they match the protocol version:

    xferlab stream -J -t 0.3 -i 0.1 -P 2 --bidir > /tmp/r.json
    python3 fuzz/make-corpus.py /tmp/r.json

The first byte of each input is the read size the drivers cut the rest
into (see crates/xferlab-core/src/fuzz.rs)."""

import ast
import hashlib
import hmac
import json
import os
import re
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAPTURES = os.path.join(ROOT, "crates/xferlab-core/src/iperf3/captures")
OUT = os.path.join(ROOT, "fuzz/corpus")


def frame(obj):
    b = obj if isinstance(obj, bytes) else json.dumps(obj, separators=(",", ":")).encode()
    return struct.pack(">I", len(b)) + b


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def capture_streams(text):
    """(client->server bytes, server->client bytes) of the control
    connection of one decoded capture."""
    cs, sc = b"", b""
    for line in text.splitlines():
        m = re.match(r"\s+[\d.]+ (C->S|S->C) off=\d+\s+len=\d+\s+(.*)$", line)
        if not m:
            continue
        raw = m.group(2).strip()
        data = ast.literal_eval(raw) if raw.startswith("b'") or raw.startswith('b"') else bytes.fromhex(raw)
        if m.group(1) == "C->S":
            cs += data
        else:
            sc += data
    return cs, sc


def main():
    result = json.load(open(sys.argv[1]))
    software, spec = result["software"], result["spec"]
    version = software["protocol"]
    hello = frame({"type": "hello", "software": software, "spec": spec})
    results = frame({"type": "results", "report": result["client"]})
    stop = frame({"type": "stop"})
    # The drivers' key and nonce (crates/xferlab-core/src/fuzz.rs), so the
    # answer verifies: HMAC-SHA256(key, label || nonce || hello payload).
    mac = hmac.new(b"a key of sixteen bytes", b"xferlab auth v1\0" + b"\x01" * 32 + hello[4:],
                   hashlib.sha256).hexdigest()
    auth = frame({"type": "auth", "mac": mac})
    bad_auth = frame({"type": "auth", "mac": "00" * 32})
    # Messages that answer the server's go one byte per read, so the
    # driver acts (accepts, starts) before the next one arrives.
    write("xferlab_server", "hello", b"\xff" + hello)
    write("xferlab_server", "hello-split", b"\x03" + hello)
    write("xferlab_server", "hello-auth", b"\x01" + hello + auth + stop + results)
    write("xferlab_server", "hello-bad-auth", b"\x01" + hello + bad_auth)
    write("xferlab_server", "hello-stop-results", b"\x01" + hello + stop + results)
    write("xferlab_server", "error", b"\x10" + frame({"type": "error", "code": "busy", "message": "x"}))
    write("xferlab_server", "records", b"\x08XFRL" + struct.pack(">H", version) + b"\x02\x00" + bytes(range(20)))
    pre = b"XFRL" + struct.pack(">H", version) + b"\x01\x00"
    welcome = frame({"type": "welcome", "session": "ab" * 16, "software": software, "host": result["client"]["host"],
                     "max_duration_s": 3600.0, "udp_ports": [5001, 5002], "rr_port": None})
    server_report = result["server"]
    write("xferlab_client", "welcome-start", b"\xff" + pre + welcome + frame({"type": "start"}))
    write("xferlab_client", "challenge", b"\xff" + pre + frame({"type": "challenge", "nonce": "11" * 32}) + welcome)
    write("xferlab_client", "results", b"\x01" + pre + welcome + frame({"type": "start"})
          + frame({"type": "results", "report": server_report}))
    for name in sorted(os.listdir(CAPTURES)):
        with open(os.path.join(CAPTURES, name)) as f:
            text = f.read()
        cs, sc = capture_streams(text)
        tag = name.removeprefix("decoded_").removesuffix(".txt")
        # The drivers have read the cookie already.
        write("iperf3_server", tag, b"\xff" + cs[37:])
        write("iperf3_client", tag, b"\x07" + sc)
        for part in re.findall(r"b'(\{.*?\})'", text):
            body = ast.literal_eval("b'" + part + "'")
            kind = "params" if b'"cpu_util_total"' not in body else "results"
            write("iperf3_json", f"{tag}-{kind}-{hashlib.sha1(body).hexdigest()[:8]}", body)
    write("udp_headers", "xferlab", struct.pack(">QQ", 7, 123456789) + b"\0" * 16)
    write("udp_headers", "iperf3-32", struct.pack(">III", 1, 2, 3) + b"\0" * 4)
    write("udp_headers", "iperf3-64", struct.pack(">IIQ", 1, 2, 1 << 40))
    write("udp_headers", "short", b"\x01\x02\x03")


if __name__ == "__main__":
    main()
