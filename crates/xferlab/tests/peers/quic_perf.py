#!/usr/bin/env python3
"""A QUIC performance protocol peer on aioquic, for tests/quic_perf.rs.

draft-banks-quic-performance-00, ALPN "perf": the client opens a
bidirectional stream, sends the number of bytes it wants back (8 bytes,
big-endian), then its upload, then FIN; the server reads to FIN, then
sends that many bytes and FIN. aioquic is an independent QUIC stack (its
own TLS, loss recovery and congestion control, in Python), so a test that
passes against it shows xferlab speaks the protocol, not just itself.

Installed with `pip install aioquic==1.7.2` (.ci/run pins it).

Modes (each prints JSON lines on stdout):
  --listen HOST:PORT --cert PEM --key PEM [--retry]
      serve; prints {"listening": "HOST:PORT"} once bound, then one line
      per finished request stream: {"stream":..,"uploaded":..,"sent":..}
  --connect HOST:PORT --upload N --download N [--streams K] [--uni]
      run K request streams on one connection (each uploads N and asks for
      N back; --uni: on unidirectional streams, answered on the server's);
      prints {"uploaded":..,"downloaded":..,"seconds":..} or
      {"error": ..., "uploaded":..,"downloaded":..} (exit 1)
  --stall HOST:PORT --count N
      N connections that answer the Retry and then fall silent mid-
      handshake; prints how each ended: {"connections": [{"code", "reason"}
      or {"open": true}, ...]}
  --flood HOST:PORT --count N
      send N distinct client Initial packets (real ones, made by aioquic,
      each with new connection IDs) from one UDP socket without answering
      anything; prints what came back: {"sent_bytes", "recv_bytes",
      "recv_packets", "retry_packets", "other_packets"}
"""

import argparse
import asyncio
import json
import socket
import ssl
import sys
import time

from aioquic.asyncio import connect, serve
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import (
    ConnectionTerminated,
    StreamDataReceived,
    StreamReset,
)

ALPN = ["perf"]
# Response/upload bytes queued in aioquic's send buffer at a time: aioquic
# keeps a stream's unacknowledged bytes in one bytearray and trims it on
# every ACK, so queueing a whole large response costs memory and time
# (each trim moves the rest); 1 MiB keeps a loopback path busy.
QUEUE = 1 << 20
CHUNK = bytes(64 * 1024)


def hostport(s):
    host, _, port = s.rpartition(":")
    return host.strip("[]"), int(port)


def big_buffers(transport):
    """4 MiB socket buffers on aioquic's socket (as xferlab's QUIC sockets
    have): a Python stack reads slower than a train of packets arrives,
    and the default 208 KiB dropped over a thousand datagrams per second
    on loopback, among them the server's CONNECTION_CLOSE."""
    sock = transport.get_extra_info("socket")
    for opt in (33, socket.SO_RCVBUF):  # SO_RCVBUFFORCE (root), else capped at rmem_max
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, 4 << 20)
            break
        except OSError:
            pass


def emit(obj):
    print(json.dumps(obj), flush=True)


def queued(quic, sid):
    """Bytes written to stream `sid` and not yet acknowledged."""
    stream = quic._streams.get(sid)
    if stream is None:
        return 0
    # aioquic 1.7.2: the sender keeps unacknowledged data in _buffer.
    return len(stream.sender._buffer)


class Sender:
    """Feeds `total` bytes into a stream as its buffer drains, then FIN."""

    def __init__(self, sid, total, prefix=b""):
        self.sid = sid
        self.prefix = prefix
        self.left = total
        self.written = 0
        self.done = False

    def pump(self, quic):
        if self.done:
            return False
        moved = False
        if self.prefix:
            quic.send_stream_data(self.sid, self.prefix)
            self.prefix = b""
            moved = True
        while self.left > 0 and queued(quic, self.sid) < QUEUE:
            n = min(self.left, len(CHUNK))
            quic.send_stream_data(self.sid, CHUNK[:n])
            self.left -= n
            self.written += n
            moved = True
        if self.left == 0:
            quic.send_stream_data(self.sid, b"", end_stream=True)
            self.done = True
            moved = True
        return moved


class PerfServer(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.requests = {}  # sid -> [header bytes, uploaded]
        self.senders = {}
        self.pumping = None

    def quic_event_received(self, event):
        if isinstance(event, StreamDataReceived):
            req = self.requests.setdefault(event.stream_id, [b"", 0])
            data = event.data
            if len(req[0]) < 8:
                take = 8 - len(req[0])
                req[0] += data[:take]
                data = data[take:]
            req[1] += len(data)
            if event.end_stream:
                if len(req[0]) < 8:
                    self._quic.reset_stream(event.stream_id, 1)
                    return
                asked = int.from_bytes(req[0], "big")
                self.senders[event.stream_id] = Sender(event.stream_id, asked)
                self.pump()
        elif isinstance(event, ConnectionTerminated):
            if self.pumping:
                self.pumping.cancel()

    def pump(self):
        self.pump_once()
        if self.senders and self.pumping is None:
            self.pumping = asyncio.ensure_future(self.pump_loop())

    async def pump_loop(self):
        try:
            while self.senders:
                await asyncio.sleep(0.002)
                self.pump_once()
        finally:
            self.pumping = None

    def pump_once(self):
        moved = False
        for sid, s in list(self.senders.items()):
            if s.pump(self._quic):
                moved = True
            if s.done:
                req = self.requests.pop(sid, [b"", 0])
                emit({"stream": sid, "uploaded": req[1], "sent": s.written})
                del self.senders[sid]
        if moved:
            self.transmit()


class PerfClient(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.streams = {}  # sid -> [asked, received, fin]
        self.senders = []
        self.finished = asyncio.get_event_loop().create_future()
        self.error = None

    def start(self, streams, upload, download, uni=False):
        # Unidirectional requests are answered on streams the server
        # opens: counted in `answers`, each to hold `download` bytes.
        self.uni = uni
        self.answers = {}
        self.asked = download
        self.wanted = streams
        for _ in range(streams):
            sid = self._quic.get_next_available_stream_id(is_unidirectional=uni)
            if not uni:
                self.streams[sid] = [download, 0, False]
            s = Sender(sid, upload, prefix=download.to_bytes(8, "big"))
            # aioquic makes the stream on its first write: the next
            # get_next_available_stream_id() then names another one.
            s.pump(self._quic)
            self.senders.append(s)
        self.tick()
        asyncio.ensure_future(self.pump_loop())

    def tick(self):
        moved = False
        for s in self.senders:
            if self._quic._close_event is not None:
                break
            if s.pump(self._quic):
                moved = True
        if moved:
            self.transmit()

    async def pump_loop(self):
        while not self.finished.done():
            await asyncio.sleep(0.002)
            self.tick()
            # aioquic reports a peer's CONNECTION_CLOSE as an event only
            # when its draining period (3 PTOs, seconds here) is over; the
            # close itself is known at once (aioquic 1.7.2: _close_event).
            ev = self._quic._close_event
            if ev is not None:
                self.quic_event_received(ev)

    def fail(self, why):
        if self.error is None:
            self.error = why
        if not self.finished.done():
            self.finished.set_result(None)

    def quic_event_received(self, event):
        if isinstance(event, StreamDataReceived) and self.uni and event.stream_id % 4 == 3:
            st = self.answers.setdefault(event.stream_id, [self.asked, 0, False])
        elif isinstance(event, StreamDataReceived):
            st = self.streams.get(event.stream_id)
        if isinstance(event, StreamDataReceived):
            if st is None:
                return
            st[1] += len(event.data)
            if st[1] > st[0]:
                self.fail(f"stream {event.stream_id}: got {st[1]} bytes, asked {st[0]}")
            if event.end_stream:
                st[2] = True
                if st[1] != st[0]:
                    self.fail(f"stream {event.stream_id}: FIN after {st[1]} of {st[0]} bytes")
                done = all(s[2] for s in self.streams.values())
                if self.uni:
                    done = len(self.answers) == self.wanted and all(s[2] for s in self.answers.values())
                if done and not self.finished.done():
                    self.finished.set_result(None)
        elif isinstance(event, StreamReset):
            self.fail(f"stream {event.stream_id} reset by the server (code {event.error_code})")
        elif isinstance(event, ConnectionTerminated):
            self.fail(
                f"connection closed by the server: code {event.error_code}, reason {event.reason_phrase!r}"
            )


async def run_server(args):
    cfg = QuicConfiguration(is_client=False, alpn_protocols=ALPN)
    cfg.load_cert_chain(args.cert, args.key)
    host, port = hostport(args.listen)
    server = await serve(host, port, configuration=cfg, create_protocol=PerfServer, retry=args.retry)
    big_buffers(server._transport)
    addr = server._transport.get_extra_info("sockname")
    emit({"listening": f"{addr[0]}:{addr[1]}"})
    await asyncio.Future()


async def run_client(args):
    cfg = QuicConfiguration(is_client=True, alpn_protocols=ALPN)
    cfg.verify_mode = ssl.CERT_NONE
    cfg.idle_timeout = args.timeout
    host, port = hostport(args.connect)
    t0 = time.monotonic()
    result = {"uploaded": 0, "downloaded": 0}
    try:
        async with connect(
            host, port, configuration=cfg, create_protocol=PerfClient, wait_connected=True
        ) as client:
            big_buffers(client._transport)
            client.start(args.streams, args.upload, args.download, uni=args.uni)
            try:
                await asyncio.wait_for(client.finished, args.timeout)
            except asyncio.TimeoutError:
                client.fail(f"no end of the responses within {args.timeout} s")
            result["uploaded"] = sum(s.written for s in client.senders)
            result["downloaded"] = sum(s[1] for s in client.streams.values()) + sum(
                s[1] for s in client.answers.values()
            )
            result["seconds"] = time.monotonic() - t0
            if client.error:
                result["error"] = client.error
    except (ConnectionError, OSError, asyncio.TimeoutError) as e:
        result["error"] = f"cannot connect: {e!r}"
    emit(result)
    return 1 if "error" in result else 0


def run_flood(args):
    host, port = hostport(args.flood)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect((host, port))
    cfg = QuicConfiguration(is_client=True, alpn_protocols=ALPN)
    sent = 0
    got = {"sent_bytes": 0, "recv_bytes": 0, "recv_packets": 0, "retry_packets": 0, "other_packets": 0}

    def count(data):
        got["recv_bytes"] += len(data)
        got["recv_packets"] += 1
        # Long header (bit 7), packet type in bits 4-5: 3 is Retry (RFC 9000, 17.2).
        if data[0] & 0x80 and (data[0] & 0x30) >> 4 == 3:
            got["retry_packets"] += 1
        else:
            got["other_packets"] += 1

    for _ in range(args.count):
        conn = QuicConnection(configuration=cfg)
        conn.connect((host, port), now=time.monotonic())
        for data, _addr in conn.datagrams_to_send(now=time.monotonic()):
            sock.send(data)
            sent += len(data)
        # Answers are read as they come, so this socket's own receive
        # buffer (256 small packets by default) never drops one.
        sock.setblocking(False)
        while True:
            try:
                count(sock.recv(65536))
            except (BlockingIOError, ConnectionRefusedError):
                break
        sock.setblocking(True)
    got["sent_bytes"] = sent
    sock.settimeout(args.quiet)
    while True:
        try:
            data = sock.recv(65536)
        except (socket.timeout, ConnectionRefusedError):
            break
        count(data)
    emit(got)
    return 0


def run_stall(args):
    """Opens `count` connections that answer the server's Retry and then
    fall silent mid-handshake (they never send their Finished), each on a
    socket of its own; after `quiet` seconds with nothing new, reports how
    each ended: refused (CONNECTION_REFUSED, 0x2), closed by the server
    (its code and reason) or still open."""
    host, port = hostport(args.stall)
    cfg = QuicConfiguration(is_client=True, alpn_protocols=ALPN)
    cfg.verify_mode = ssl.CERT_NONE
    peers = []
    for _ in range(args.count):
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
        sock.connect((host, port))
        sock.setblocking(False)
        conn = QuicConnection(configuration=cfg)
        conn.connect((host, port), now=time.monotonic())
        for data, _ in conn.datagrams_to_send(now=time.monotonic()):
            sock.send(data)
        peers.append({"sock": sock, "conn": conn, "retried": False})
    last = time.monotonic()
    while time.monotonic() - last < args.quiet:
        time.sleep(0.01)
        for p in peers:
            while True:
                try:
                    data = p["sock"].recv(65536)
                except (BlockingIOError, ConnectionRefusedError):
                    break
                last = time.monotonic()
                p["conn"].receive_datagram(data, (host, port), now=time.monotonic())
                # Answer the Retry (the new Initial carries its token),
                # then nothing: the handshake stalls.
                if not p["retried"] and p["conn"]._retry_count:
                    p["retried"] = True
                    for out, _ in p["conn"].datagrams_to_send(now=time.monotonic()):
                        p["sock"].send(out)
    ends = []
    for p in peers:
        ev = p["conn"]._close_event
        if ev is None:
            ends.append({"open": True})
        else:
            ends.append({"code": ev.error_code, "reason": ev.reason_phrase})
    emit({"connections": ends})
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen")
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--retry", action="store_true")
    p.add_argument("--connect")
    p.add_argument("--upload", type=int, default=0)
    p.add_argument("--download", type=int, default=0)
    p.add_argument("--streams", type=int, default=1)
    p.add_argument("--uni", action="store_true", help="client: requests on unidirectional streams")
    p.add_argument("--timeout", type=float, default=20.0)
    p.add_argument("--flood")
    p.add_argument("--stall", help="HOST:PORT: connections that fall silent mid-handshake")
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--quiet", type=float, default=0.5, help="flood: stop after this long without a packet")
    args = p.parse_args()
    if args.listen:
        try:
            asyncio.run(run_server(args))
        except KeyboardInterrupt:
            pass
        return 0
    if args.connect:
        return asyncio.run(run_client(args))
    if args.flood:
        return run_flood(args)
    if args.stall:
        return run_stall(args)
    p.error("one of --listen, --connect, --flood, --stall")


if __name__ == "__main__":
    sys.exit(main())
