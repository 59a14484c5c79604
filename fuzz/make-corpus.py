#!/usr/bin/env python3
"""Writes the seed corpus of each fuzz target (fuzz/corpus/<target>/):
whole, valid exchanges taken from the iperf3 byte captures in
crates/xferlab-core/src/iperf3/captures and from xferlab's own messages,
so mutations start from inputs that reach every state. The first byte of
each input is the read size the drivers cut the rest into (see
crates/xferlab-core/src/fuzz.rs). Run from the repository root."""

import ast
import hashlib
import json
import os
import re
import struct

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


SPEC = {
    "pattern": "stream", "transport": "tcp", "direction": "bidir", "parallel": 2,
    "limit": {"duration": {"seconds": 1.0}}, "omit_s": 0.0, "interval_s": 0.5,
    "knobs": {"size": 131072, "buffer": None, "congestion": None, "nodelay": False,
              "mss": None, "tos": None, "max_pacing_rate": None, "recv_mode": "copy"},
}
SOFTWARE = {"name": "xferlab", "version": "0.1.0", "protocol": 1}
INTERVAL = {"start_s": 0.0, "end_s": 0.5, "omitted": False, "bytes": 1000, "bits_per_second": 16000.0}
TOTAL = {"start_s": 0.0, "end_s": 1.0, "bytes": 2000, "bits_per_second": 16000.0, "bytes_all": 2000}
REPORT = {
    "endpoint": "client", "host": {}, "embedded": False, "duration_s": 1.0,
    "flows": [{"id": 0, "direction": "c2s", "role": "sender", "intervals": [INTERVAL, INTERVAL],
               "total": TOTAL}],
    "sums": [], "cpu": {"percent": 1.0, "user_s": 0.0, "system_s": 0.0},
    "counters": {}, "warnings": [],
}


def main():
    hello = frame({"type": "hello", "software": SOFTWARE, "spec": SPEC})
    results = frame({"type": "results", "report": REPORT})
    stop = frame({"type": "stop"})
    auth = frame({"type": "auth", "mac": "00" * 32})
    write("xferlab_server", "hello", b"\xff" + hello)
    write("xferlab_server", "hello-split", b"\x03" + hello)
    write("xferlab_server", "hello-auth", b"\xff" + hello + auth)
    write("xferlab_server", "hello-stop-results", b"\xff" + hello + stop + results)
    write("xferlab_server", "error", b"\x10" + frame({"type": "error", "code": "busy", "message": "x"}))
    write("xferlab_server", "records", b"\x08XFRL\x00\x01\x02\x00" + bytes(range(20)))
    pre = b"XFRL\x00\x01\x01\x00"
    welcome = frame({"type": "welcome", "session": "ab" * 16, "software": SOFTWARE, "host": {},
                     "max_duration_s": 3600.0, "udp_ports": [5001, 5002], "rr_port": None})
    server_report = dict(REPORT, endpoint="server")
    write("xferlab_client", "welcome-start", b"\xff" + pre + welcome + frame({"type": "start"}))
    write("xferlab_client", "challenge", b"\xff" + pre + frame({"type": "challenge", "nonce": "11" * 32}) + welcome)
    write("xferlab_client", "results", b"\x40" + pre + welcome + frame({"type": "start"})
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
