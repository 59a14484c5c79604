//! A QUIC flow's client end speaking the QUIC performance protocol
//! (draft-banks-quic-performance-00, ALPN `perf`; the per-stream state
//! is [`xferlab_core::transport::quic::perf::ClientStream`]) to a foreign
//! perf server, for `stream --quic --quic-perf` ([`crate::quicperf`]).
//! The flow's loop, connection and counters are the QUIC flow's
//! ([`super::flow`]); only what goes on the streams differs:
//!
//! * **a sender** (forward) opens `--streams` bidirectional streams, each
//!   a request for 0 bytes back followed by its share of the upload
//!   (`-n` split over the streams, or until the stop), then FIN; the
//!   flow ends when the server's (empty) responses have ended, which it
//!   sends once it read each upload to its end.
//! * **a receiver** (`-R`) opens the streams as requests for its share of
//!   `-n`, or for 2^64-1 bytes with `-t`, and counts what comes back,
//!   checking each response holds exactly what it asked for; at the stop
//!   (a timed test) it sends STOP_SENDING on each stream and closes the
//!   connection, which the draft allows a client to do.
//!
//! Bytes are counted where the flow's direction puts them: written
//! upload bytes for a sender (as a TCP sender counts what the socket
//! took), received response bytes for a receiver.

use quinn_proto::{Connection, Dir, ReadError, StreamEvent, StreamId, VarInt, WriteError};
use xferlab_core::transport::quic::perf::{code, ClientStream};

use crate::transport::sizing::DEFAULT_SIZE;
use crate::transport::FlowJob;

/// What one turn of the perf client's work did.
#[derive(Debug, Default)]
pub struct PerfStep {
    pub busy: bool,
    /// Every stream is over: time to close the connection.
    pub close: bool,
    pub failed: Option<String>,
}

/// One request stream.
struct Req {
    id: StreamId,
    state: ClientStream,
    /// The stream refused a write (flow control): wait for `Writable`.
    blocked: bool,
    fin_sent: bool,
    /// STOP_SENDING sent (a timed download at its end).
    stopped: bool,
}

/// The perf client's streams on one connection.
pub struct PerfClient {
    chunk: Vec<u8>,
    sender: bool,
    want: u32,
    /// Each stream's share of the flow's quota (None: until the stop).
    shares: Vec<Option<u64>>,
    reqs: Vec<Req>,
    ready: bool,
    bytes: u64,
    failed: Option<String>,
}

impl PerfClient {
    /// A flow's client end: `streams` request streams carrying its
    /// `job.quota` (split evenly, the remainder on the first).
    pub fn new(job: &FlowJob<'_>, sender: bool, streams: u32) -> Self {
        let len = if job.sizes.write_size > 0 {
            job.sizes.write_size
        } else {
            DEFAULT_SIZE
        };
        let n = u64::from(streams.max(1));
        let shares = (0..n)
            .map(|i| job.quota.map(|q| q / n + if i == 0 { q % n } else { 0 }))
            .collect();
        PerfClient {
            chunk: (0..len).map(|i| (i % 251) as u8).collect(),
            sender,
            want: streams.max(1),
            shares,
            reqs: Vec::with_capacity(streams as usize),
            ready: true,
            bytes: 0,
            failed: None,
        }
    }

    /// Bytes this flow moved its way.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn on_stream(&mut self, ev: StreamEvent) {
        match ev {
            StreamEvent::Writable { id } => {
                if let Some(r) = self.reqs.iter_mut().find(|r| r.id == id) {
                    r.blocked = false;
                }
            }
            StreamEvent::Readable { .. } => self.ready = true,
            StreamEvent::Stopped { id, error_code } => {
                self.failed.get_or_insert_with(|| {
                    format!("the QUIC perf server stopped reading request stream {id} (code {error_code})")
                });
            }
            _ => {}
        }
    }

    pub fn work(&mut self, conn: &mut Connection, stopping: bool) -> PerfStep {
        let mut step = PerfStep {
            failed: self.failed.take(),
            ..PerfStep::default()
        };
        if step.failed.is_some() {
            return step;
        }
        // Streams past the server's limit open as its earlier ones end
        // (MAX_STREAMS credit); after the stop no new one starts.
        while self.reqs.len() < self.want as usize && !stopping {
            let Some(id) = conn.streams().open(Dir::Bi) else {
                break;
            };
            let share = self.shares[self.reqs.len()];
            let state = if self.sender {
                ClientStream::new(0, share)
            } else {
                ClientStream::new(share.unwrap_or(u64::MAX), Some(0))
            };
            self.reqs.push(Req {
                id,
                state,
                blocked: false,
                fin_sent: false,
                stopped: false,
            });
            step.busy = true;
        }
        for r in &mut self.reqs {
            if stopping && self.sender {
                r.state.stop_upload();
            }
            if let Err(why) = write(conn, r, &self.chunk, &mut self.bytes, &mut step.busy) {
                step.failed = Some(why);
                return step;
            }
        }
        if self.ready {
            self.ready = false;
            for r in &mut self.reqs {
                if let Err(why) = read(conn, r, self.sender, &mut self.bytes, &mut step.busy) {
                    step.failed = Some(why);
                    return step;
                }
            }
        }
        // A timed download ends at the stop: the server is told to stop
        // sending, and the connection closes.
        if stopping && !self.sender {
            for r in self.reqs.iter_mut().filter(|r| !r.state.response_done()) {
                if !r.stopped {
                    let _ = conn.recv_stream(r.id).stop(VarInt::from_u32(code::DONE));
                    r.stopped = true;
                }
            }
            step.close = true;
        }
        if (self.reqs.len() == self.want as usize || stopping)
            && self.reqs.iter().all(|r| r.state.response_done())
        {
            step.close = true;
        }
        step
    }
}

/// The header, then the upload, then FIN, as far as the stream takes.
fn write(
    conn: &mut Connection,
    r: &mut Req,
    chunk: &[u8],
    bytes: &mut u64,
    busy: &mut bool,
) -> Result<(), String> {
    if r.fin_sent || r.blocked {
        return Ok(());
    }
    let mut send = conn.send_stream(r.id);
    loop {
        let header = r.state.header();
        let result = if !header.is_empty() {
            send.write(header).map(|n| (n, true))
        } else {
            let n = r.state.next_upload(chunk.len());
            if n == 0 {
                break;
            }
            send.write(&chunk[..n]).map(|n| (n, false))
        };
        match result {
            Ok((n, true)) => r.state.header_written(n),
            Ok((n, false)) => {
                r.state.uploaded(n);
                *bytes += n as u64;
            }
            Err(WriteError::Blocked) => {
                r.blocked = true;
                return Ok(());
            }
            Err(e) => return Err(format!("QUIC perf request stream {}: {e}", r.id)),
        }
        *busy = true;
    }
    if r.state.upload_done() {
        let _ = send.finish();
        r.fin_sent = true;
        *busy = true;
    }
    Ok(())
}

/// The response so far: counted (a receiver's bytes) and checked against
/// what the request asked for.
fn read(
    conn: &mut Connection,
    r: &mut Req,
    sender: bool,
    bytes: &mut u64,
    busy: &mut bool,
) -> Result<(), String> {
    if r.state.response_done() || r.stopped {
        return Ok(());
    }
    let mut recv = conn.recv_stream(r.id);
    let Ok(mut chunks) = recv.read(true) else {
        return Ok(());
    };
    let mut result = Ok(());
    loop {
        match chunks.next(usize::MAX) {
            Ok(Some(c)) => {
                *busy = true;
                if let Err(e) = r.state.received(c.bytes.len()) {
                    result = Err(format!("QUIC perf stream {}: {e}", r.id));
                    break;
                }
                if !sender {
                    *bytes += c.bytes.len() as u64;
                }
            }
            Ok(None) => {
                *busy = true;
                if let Err(e) = r.state.response_fin() {
                    result = Err(format!("QUIC perf stream {}: {e}", r.id));
                }
                break;
            }
            Err(ReadError::Blocked) => break,
            Err(ReadError::Reset(code)) => {
                result = Err(format!(
                    "the QUIC perf server reset its response on stream {} (code {code})",
                    r.id
                ));
                break;
            }
        }
    }
    let _ = chunks.finalize();
    result
}
