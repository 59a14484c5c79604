//! The QUIC performance protocol, sans-IO: what each end of one request
//! stream must count and check, handed the bytes and the time, never
//! touching a socket or a clock.
//!
//! # What is implemented
//!
//! **draft-banks-quic-performance-00** (N. Banks, December 2020; the
//! revision every public implementation speaks: quinn's `perf`, msquic's
//! secnetperf, picoquic's `quicperf`, quiche's and aioquic-based peers),
//! on QUIC version 1 (RFC 9000), ALPN **`perf`** (the only ALPN the draft
//! defines; no other is offered or accepted).
//!
//! * **Bidirectional streams** (the client opens them): the client sends
//!   the number of bytes it wants back as an 8-byte unsigned integer in
//!   network byte order, then whatever it uploads, then FIN. The server
//!   reads to FIN, counting (and discarding) the upload, then sends that
//!   many bytes on the same stream and FIN.
//! * **Unidirectional streams**: the same request on a client-opened
//!   unidirectional stream; the server answers on a unidirectional stream
//!   of its own (the draft pairs them in order; nothing on the wire links
//!   the two, so a client that wants a download uses a bidirectional
//!   stream, as xferlab's client does).
//! * The response's bytes are opaque: neither end checks their content
//!   (the draft gives them no meaning).
//! * Either end may end a stream early (the draft lets a timed client
//!   stop reading at its deadline with STOP_SENDING, or close the
//!   connection); that is not an error of the protocol, and the counts up
//!   to that point are what was moved.
//!
//! The state machines here: [`RequestReader`] (server: the request as it
//! arrives, the header split across reads anywhere), [`Response`]
//! (server: the bytes still owed, capped by [`ServerLimits`]),
//! [`ClientStream`] (client: the header it sends, the upload it owes, the
//! download it counts and checks against what it asked for) and
//! [`Pacer`] (the server's sending budget as a token bucket on the time
//! it is handed).

use std::time::Duration;

use crate::time::Time;

/// The ALPN token of draft-banks-quic-performance-00.
pub const ALPN: &[u8] = b"perf";

/// The UDP port perf servers listen on by convention (quinn's
/// perf_server and secnetperf default to it).
pub const PORT: u16 = 4433;

/// Bytes of the request header: the response size, u64 big-endian.
pub const REQUEST_HEADER_LEN: usize = 8;

/// Application error codes (RESET_STREAM, STOP_SENDING, CONNECTION_CLOSE)
/// xferlab's ends use; the draft defines none, and any peer reads them as
/// opaque numbers beside the close's reason text.
pub mod code {
    /// Nothing wrong: a timed client stopping a download, a finished
    /// connection.
    pub const DONE: u32 = 0;
    /// A request stream that broke the protocol (a short header, data
    /// after its end).
    pub const MALFORMED: u32 = 1;
    /// The server's budget ran out (`--max-duration`): the connection is
    /// cut.
    pub const BUDGET: u32 = 2;
    /// The handshake took longer than the server allows.
    pub const HANDSHAKE_TIMEOUT: u32 = 3;
}

/// The header a client sends first on a request stream.
pub fn encode_request(response_bytes: u64) -> [u8; REQUEST_HEADER_LEN] {
    response_bytes.to_be_bytes()
}

/// What a request stream did wrong, as the end that saw it says it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PerfError {
    /// The request stream ended before its 8-byte header.
    #[error("the request stream ended after {got} of its {REQUEST_HEADER_LEN} header bytes (a perf request starts with the response size, 8 bytes big-endian)")]
    ShortHeader { got: usize },
    /// Bytes arrived after the stream's FIN.
    #[error("data after the end of the request stream")]
    DataAfterFin,
    /// The server sent more than the client asked for.
    #[error("the server sent {got} bytes on a stream that asked for {asked}")]
    Overrun { asked: u64, got: u64 },
    /// The server ended its response before all the bytes asked for.
    #[error("the server ended its response after {got} of the {asked} bytes asked for")]
    ShortResponse { asked: u64, got: u64 },
}

/// Where a [`RequestReader`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadState {
    /// Collecting the header.
    Header,
    /// Counting the upload.
    Upload,
    /// FIN seen.
    Done,
}

/// The server's reading of one request stream.
#[derive(Debug, Clone)]
pub struct RequestReader {
    state: ReadState,
    header: [u8; REQUEST_HEADER_LEN],
    have: usize,
    asked: u64,
    uploaded: u64,
}

impl Default for RequestReader {
    fn default() -> Self {
        Self::new()
    }
}

/// A request read to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Bytes the client asked the server to send back.
    pub asked: u64,
    /// Bytes the client uploaded after the header.
    pub uploaded: u64,
}

impl RequestReader {
    pub fn new() -> Self {
        RequestReader {
            state: ReadState::Header,
            header: [0; REQUEST_HEADER_LEN],
            have: 0,
            asked: 0,
            uploaded: 0,
        }
    }

    /// Takes the next bytes of the stream, in order. Returns the response
    /// size when the header became complete with these bytes (once per
    /// stream), so a server can refuse an impossible request before the
    /// upload ends.
    pub fn feed(&mut self, mut data: &[u8]) -> Result<Option<u64>, PerfError> {
        let mut completed = None;
        if self.state == ReadState::Done && !data.is_empty() {
            return Err(PerfError::DataAfterFin);
        }
        if self.state == ReadState::Header {
            let take = (REQUEST_HEADER_LEN - self.have).min(data.len());
            self.header[self.have..self.have + take].copy_from_slice(&data[..take]);
            self.have += take;
            data = &data[take..];
            if self.have == REQUEST_HEADER_LEN {
                self.asked = u64::from_be_bytes(self.header);
                self.state = ReadState::Upload;
                completed = Some(self.asked);
            }
        }
        if self.state == ReadState::Upload {
            self.uploaded += data.len() as u64;
        }
        Ok(completed)
    }

    /// Upload bytes counted so far (the header excluded).
    pub fn uploaded(&self) -> u64 {
        self.uploaded
    }

    /// The response size, once the header is complete.
    pub fn asked(&self) -> Option<u64> {
        (self.state != ReadState::Header).then_some(self.asked)
    }

    /// The stream's FIN: the request is complete, or too short.
    pub fn finish(&mut self) -> Result<Request, PerfError> {
        if self.state == ReadState::Header {
            return Err(PerfError::ShortHeader { got: self.have });
        }
        self.state = ReadState::Done;
        Ok(Request {
            asked: self.asked,
            uploaded: self.uploaded,
        })
    }
}

/// What a server lets one request ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// The most one response may be (None: as asked). The xferlab server
    /// leaves it None and bounds a response by time and rate instead
    /// (see [`Pacer`]), since a timed client asks for 2^64-1 bytes and
    /// stops reading at its deadline.
    pub max_response: Option<u64>,
}

/// The server's response on one stream: the bytes it still owes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    owed: u64,
    sent: u64,
    /// The request asked for more than [`ServerLimits::max_response`].
    pub capped: bool,
}

impl Response {
    /// The response to `req` under `limits`.
    pub fn new(req: Request, limits: &ServerLimits) -> Response {
        let owed = limits.max_response.map_or(req.asked, |m| req.asked.min(m));
        Response {
            owed,
            sent: 0,
            capped: owed < req.asked,
        }
    }

    /// How much of a buffer of `room` bytes to write next.
    pub fn next_chunk(&self, room: usize) -> usize {
        usize::try_from(self.owed - self.sent).map_or(room, |left| left.min(room))
    }

    /// `n` bytes were accepted by the stream.
    pub fn sent(&mut self, n: usize) {
        self.sent = (self.sent + n as u64).min(self.owed);
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.sent
    }

    /// Every owed byte is written: time for FIN.
    pub fn complete(&self) -> bool {
        self.sent == self.owed
    }
}

/// The client's side of one request stream: the header, then the upload,
/// then FIN; and the download counted against what was asked.
#[derive(Debug, Clone)]
pub struct ClientStream {
    header: [u8; REQUEST_HEADER_LEN],
    header_sent: usize,
    /// Upload bytes still to send (None: until told to stop).
    upload_left: Option<u64>,
    uploaded: u64,
    asked: u64,
    received: u64,
    fin_received: bool,
}

impl ClientStream {
    /// A request for `download` bytes back, uploading `upload` bytes (None:
    /// until [`ClientStream::stop_upload`]).
    pub fn new(download: u64, upload: Option<u64>) -> ClientStream {
        ClientStream {
            header: encode_request(download),
            header_sent: 0,
            upload_left: upload,
            uploaded: 0,
            asked: download,
            received: 0,
            fin_received: false,
        }
    }

    /// The header bytes still to write (empty once written).
    pub fn header(&self) -> &[u8] {
        &self.header[self.header_sent..]
    }

    /// `n` header bytes were accepted by the stream.
    pub fn header_written(&mut self, n: usize) {
        self.header_sent = (self.header_sent + n).min(REQUEST_HEADER_LEN);
    }

    /// How much of a buffer of `room` bytes to upload next (0: the
    /// header comes first, or the upload is done).
    pub fn next_upload(&self, room: usize) -> usize {
        if self.header_sent < REQUEST_HEADER_LEN {
            return 0;
        }
        match self.upload_left {
            None => room,
            Some(left) => usize::try_from(left).map_or(room, |l| l.min(room)),
        }
    }

    /// `n` upload bytes were accepted by the stream.
    pub fn uploaded(&mut self, n: usize) {
        self.uploaded += n as u64;
        if let Some(left) = &mut self.upload_left {
            *left = left.saturating_sub(n as u64);
        }
    }

    /// Ends an open-ended upload: FIN goes out next.
    pub fn stop_upload(&mut self) {
        self.upload_left = Some(0);
    }

    /// The header and the upload are written: the stream's FIN is due.
    pub fn upload_done(&self) -> bool {
        self.header_sent == REQUEST_HEADER_LEN && self.upload_left == Some(0)
    }

    /// Upload bytes written so far.
    pub fn upload_bytes(&self) -> u64 {
        self.uploaded
    }

    /// `n` response bytes arrived.
    pub fn received(&mut self, n: usize) -> Result<(), PerfError> {
        self.received += n as u64;
        if self.received > self.asked {
            return Err(PerfError::Overrun {
                asked: self.asked,
                got: self.received,
            });
        }
        Ok(())
    }

    /// The response's FIN arrived: it must hold every byte asked for.
    pub fn response_fin(&mut self) -> Result<(), PerfError> {
        self.fin_received = true;
        if self.received < self.asked {
            return Err(PerfError::ShortResponse {
                asked: self.asked,
                got: self.received,
            });
        }
        Ok(())
    }

    /// Response bytes counted so far.
    pub fn download_bytes(&self) -> u64 {
        self.received
    }

    /// Bytes asked for.
    pub fn asked(&self) -> u64 {
        self.asked
    }

    /// The whole response arrived (its FIN seen).
    pub fn response_done(&self) -> bool {
        self.fin_received
    }
}

/// A token bucket: the most a sender may send by a given time at `rate`
/// bytes per second, with at most `burst` bytes saved up while idle. The
/// server paces each connection's responses with one so that a
/// connection sends no faster than its share of `--max-rate`.
#[derive(Debug, Clone, Copy)]
pub struct Pacer {
    rate: u64,
    burst: u64,
    tokens: u64,
    at: Time,
}

impl Pacer {
    /// A full bucket at `now`.
    pub fn new(rate: u64, burst: u64, now: Time) -> Pacer {
        let rate = rate.max(1);
        Pacer {
            rate,
            burst: burst.max(1),
            tokens: burst.max(1),
            at: now,
        }
    }

    fn refill(&mut self, now: Time) {
        let Some(dt) = now.checked_duration_since(self.at) else {
            return;
        };
        let add = (dt.as_nanos().saturating_mul(u128::from(self.rate)) / 1_000_000_000) as u64;
        if add > 0 {
            self.tokens = self.tokens.saturating_add(add).min(self.burst);
            // Advance by the time those tokens took, so fractions carry.
            let used = Duration::from_nanos(
                (u128::from(add) * 1_000_000_000 / u128::from(self.rate)) as u64,
            );
            self.at = if self.tokens == self.burst {
                now
            } else {
                self.at + used
            };
        }
    }

    /// Its rate, bytes/s.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// Bytes that may be sent at `now`.
    pub fn allowance(&mut self, now: Time) -> u64 {
        self.refill(now);
        self.tokens
    }

    /// `n` bytes were sent.
    pub fn spend(&mut self, n: u64) {
        self.tokens = self.tokens.saturating_sub(n);
    }

    /// When at least `want` bytes (at most a burst) will be allowed.
    pub fn ready_at(&mut self, now: Time, want: u64) -> Time {
        self.refill(now);
        let want = want.min(self.burst);
        if self.tokens >= want {
            return now;
        }
        let nanos = u128::from(want - self.tokens) * 1_000_000_000 / u128::from(self.rate);
        self.at + Duration::from_nanos(nanos as u64 + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_split_anywhere_then_upload_counted() {
        let mut req = encode_request(1_000_000).to_vec();
        req.extend_from_slice(&[7u8; 1000]);
        for split in 0..=req.len() {
            for second in split..=req.len() {
                let mut r = RequestReader::new();
                let mut got = None;
                for part in [&req[..split], &req[split..second], &req[second..]] {
                    if let Some(n) = r.feed(part).unwrap() {
                        assert!(got.is_none(), "the header completes once");
                        got = Some(n);
                    }
                }
                assert_eq!(got, Some(1_000_000), "split at {split}/{second}");
                assert_eq!(
                    r.finish().unwrap(),
                    Request {
                        asked: 1_000_000,
                        uploaded: 1000
                    }
                );
            }
        }
    }

    #[test]
    fn a_short_header_and_data_after_fin_are_errors() {
        let mut r = RequestReader::new();
        r.feed(&[0, 0, 0]).unwrap();
        assert_eq!(r.asked(), None);
        assert_eq!(r.finish(), Err(PerfError::ShortHeader { got: 3 }));
        let mut r = RequestReader::new();
        r.feed(&encode_request(0)).unwrap();
        assert_eq!(r.asked(), Some(0));
        r.finish().unwrap();
        assert_eq!(r.feed(&[1]), Err(PerfError::DataAfterFin));
        // An empty read after FIN is no data.
        assert_eq!(r.feed(&[]), Ok(None));
        // Big-endian: the last byte is the least significant.
        let mut r = RequestReader::new();
        assert_eq!(r.feed(&[0, 0, 0, 0, 0, 0, 1, 2]), Ok(Some(258)));
    }

    #[test]
    fn the_response_owes_what_was_asked_within_the_limit() {
        let req = Request {
            asked: 10_000,
            uploaded: 0,
        };
        let mut r = Response::new(req, &ServerLimits { max_response: None });
        assert!(!r.capped);
        let mut total = 0;
        while !r.complete() {
            let n = r.next_chunk(4096);
            assert!(n > 0);
            r.sent(n);
            total += n;
        }
        assert_eq!((total, r.written()), (10_000, 10_000));
        assert_eq!(r.next_chunk(4096), 0);
        let r = Response::new(
            req,
            &ServerLimits {
                max_response: Some(3000),
            },
        );
        assert!(r.capped);
        assert_eq!(r.next_chunk(1 << 20), 3000);
        // 2^64-1 asked: chunks are the buffer's size.
        let huge = Response::new(
            Request {
                asked: u64::MAX,
                uploaded: 0,
            },
            &ServerLimits { max_response: None },
        );
        assert_eq!(huge.next_chunk(65536), 65536);
    }

    #[test]
    fn the_client_sends_header_then_upload_and_checks_the_download() {
        let mut c = ClientStream::new(5000, Some(2000));
        assert_eq!(c.next_upload(4096), 0, "header first");
        assert_eq!(c.header(), &5000u64.to_be_bytes());
        c.header_written(3);
        assert_eq!(c.header().len(), 5);
        assert_eq!(c.next_upload(4096), 0);
        c.header_written(5);
        assert!(c.header().is_empty());
        assert_eq!(c.next_upload(4096), 2000);
        c.uploaded(1500);
        assert!(!c.upload_done());
        assert_eq!(c.next_upload(4096), 500);
        c.uploaded(500);
        assert!(c.upload_done());
        assert_eq!(c.upload_bytes(), 2000);
        c.received(4000).unwrap();
        assert_eq!(
            c.clone().response_fin(),
            Err(PerfError::ShortResponse {
                asked: 5000,
                got: 4000
            })
        );
        c.received(1000).unwrap();
        c.response_fin().unwrap();
        assert!(c.response_done());
        assert_eq!(
            c.received(1),
            Err(PerfError::Overrun {
                asked: 5000,
                got: 5001
            })
        );
        // Open-ended upload until stopped.
        let mut c = ClientStream::new(0, None);
        c.header_written(8);
        assert_eq!(c.next_upload(1 << 20), 1 << 20);
        assert!(!c.upload_done());
        c.stop_upload();
        assert!(c.upload_done());
    }

    #[test]
    fn the_pacer_holds_the_rate_on_virtual_time() {
        let t0 = Time::from_nanos(1_000_000_000);
        // 1 MB/s, 10 KB burst.
        let mut p = Pacer::new(1_000_000, 10_000, t0);
        assert_eq!(p.allowance(t0), 10_000);
        p.spend(10_000);
        assert_eq!(p.allowance(t0), 0);
        // 1 ms later: 1000 bytes.
        assert_eq!(p.allowance(t0 + Duration::from_millis(1)), 1000);
        assert_eq!(
            p.ready_at(t0 + Duration::from_millis(1), 3000),
            t0 + Duration::from_millis(3) + Duration::from_nanos(1)
        );
        // Idle for long: never more than the burst.
        assert_eq!(p.allowance(t0 + Duration::from_secs(10)), 10_000);
        // Sending as allowed for 2 s of virtual time moves 2 MB (+ the
        // first burst), in 1 ms steps.
        let mut p = Pacer::new(1_000_000, 10_000, t0);
        let mut sent = 0;
        for ms in 0..=2000 {
            let now = t0 + Duration::from_millis(ms);
            let n = p.allowance(now);
            p.spend(n);
            sent += n;
        }
        assert_eq!(sent, 2_000_000 + 10_000);
        // Sub-byte steps carry: 1000 steps of 1 us at 1 MB/s = 1000 B.
        let mut p = Pacer::new(1_000_000, 10_000, t0);
        p.spend(10_000);
        let mut got = 0;
        for us in 1..=1000 {
            let n = p.allowance(t0 + Duration::from_micros(us));
            p.spend(n);
            got += n;
        }
        assert_eq!(got, 1000);
    }
}
