//! Bytes on the wire: the cookie, state codes, SERVER_ERROR, length-prefixed
//! JSON messages and the UDP stream handshake.

use serde::Serialize;

use super::Iperf3Error;

/// Length of the cookie that opens every iperf3 TCP connection.
pub const COOKIE_LEN: usize = 37;
/// The characters of a cookie (RFC 4648 base32, lower case).
pub const COOKIE_CHARS: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
/// 36 characters from [`COOKIE_CHARS`] and a NUL byte.
pub type Cookie = [u8; COOKIE_LEN];

/// Largest parameters JSON a 3.18+ server accepts (and ours accepts).
pub const MAX_PARAMS_JSON: u32 = 8 * 1024;
/// Largest results JSON we accept from a server: room for
/// `server_output_json` of a long test. iperf3 itself sets no limit here.
pub const MAX_RESULTS_JSON: u32 = 64 * 1024 * 1024;
/// Room per stream in a client's results: a client sends each stream's
/// totals only (about 200 bytes of JSON from iperf3 3.21), never
/// intervals or server output.
pub const CLIENT_RESULTS_PER_STREAM: u32 = 1024;

/// Largest results JSON a server accepts from a client of a test with
/// `streams` streams: the fixed keys plus [`CLIENT_RESULTS_PER_STREAM`]
/// per stream. A client cannot make the server parse (and hold the tree
/// of) more than its own test's size.
pub fn max_client_results_json(streams: usize) -> u32 {
    let streams = u32::try_from(streams).unwrap_or(u32::MAX);
    MAX_PARAMS_JSON.saturating_add(streams.saturating_mul(CLIENT_RESULTS_PER_STREAM))
}

/// A cookie from 36 random bytes (each byte picks one of 32 characters,
/// so uniform bytes give uniform characters).
pub fn make_cookie(random: &[u8; 36]) -> Cookie {
    let mut c = [0u8; COOKIE_LEN];
    for (out, r) in c.iter_mut().zip(random) {
        *out = COOKIE_CHARS[usize::from(r & 31)];
    }
    c
}

/// Whether `b` is exactly a cookie: 36 characters from [`COOKIE_CHARS`]
/// then a NUL byte.
pub fn is_cookie(b: &[u8]) -> bool {
    b.len() == COOKIE_LEN
        && b[COOKIE_LEN - 1] == 0
        && b[..COOKIE_LEN - 1].iter().all(|c| COOKIE_CHARS.contains(c))
}

/// Whether `b` can still become a cookie: for classifying a connection by
/// its first bytes before all 37 have arrived.
pub fn may_be_cookie(b: &[u8]) -> bool {
    b.len() <= COOKIE_LEN
        && b.iter().enumerate().all(|(i, c)| {
            if i == COOKIE_LEN - 1 {
                *c == 0
            } else {
                COOKIE_CHARS.contains(c)
            }
        })
}

/// The states iperf3 sends on the control connection, one signed byte each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    TestStart,
    TestRunning,
    TestEnd,
    ParamExchange,
    CreateStreams,
    ServerTerminate,
    ClientTerminate,
    ExchangeResults,
    DisplayResults,
    IperfDone,
    AccessDenied,
    ServerError,
}

impl State {
    pub const ALL: [State; 12] = [
        State::TestStart,
        State::TestRunning,
        State::TestEnd,
        State::ParamExchange,
        State::CreateStreams,
        State::ServerTerminate,
        State::ClientTerminate,
        State::ExchangeResults,
        State::DisplayResults,
        State::IperfDone,
        State::AccessDenied,
        State::ServerError,
    ];

    /// The value as iperf3 defines it (a C `signed char`).
    pub fn code(self) -> i8 {
        match self {
            State::TestStart => 1,
            State::TestRunning => 2,
            State::TestEnd => 4,
            State::ParamExchange => 9,
            State::CreateStreams => 10,
            State::ServerTerminate => 11,
            State::ClientTerminate => 12,
            State::ExchangeResults => 13,
            State::DisplayResults => 14,
            State::IperfDone => 16,
            State::AccessDenied => -1,
            State::ServerError => -2,
        }
    }

    /// The byte on the wire.
    pub fn byte(self) -> u8 {
        self.code() as u8
    }

    pub fn from_byte(b: u8) -> Option<State> {
        State::ALL.into_iter().find(|s| s.byte() == b)
    }

    /// iperf3's name for the state.
    pub fn name(self) -> &'static str {
        match self {
            State::TestStart => "TEST_START",
            State::TestRunning => "TEST_RUNNING",
            State::TestEnd => "TEST_END",
            State::ParamExchange => "PARAM_EXCHANGE",
            State::CreateStreams => "CREATE_STREAMS",
            State::ServerTerminate => "SERVER_TERMINATE",
            State::ClientTerminate => "CLIENT_TERMINATE",
            State::ExchangeResults => "EXCHANGE_RESULTS",
            State::DisplayResults => "DISPLAY_RESULTS",
            State::IperfDone => "IPERF_DONE",
            State::AccessDenied => "ACCESS_DENIED",
            State::ServerError => "SERVER_ERROR",
        }
    }
}

/// SERVER_ERROR followed by iperf3's `i_errno` and the C `errno`, each a
/// big-endian int32.
pub fn server_error(i_errno: i32, errno: i32) -> [u8; 9] {
    let mut out = [0u8; 9];
    out[0] = State::ServerError.byte();
    out[1..5].copy_from_slice(&i_errno.to_be_bytes());
    out[5..9].copy_from_slice(&errno.to_be_bytes());
    out
}

/// What a busy server writes on a new control connection (or a data
/// connection with a wrong cookie) before closing it.
pub fn access_denied() -> [u8; 1] {
    [State::AccessDenied.byte()]
}

/// A JSON message: `u32` big-endian length, then the JSON (no NUL).
pub fn encode_json_frame<T: Serialize + ?Sized>(msg: &T) -> Vec<u8> {
    let mut out = vec![0u8; 4];
    serde_json::to_writer(&mut out, msg).expect("iperf3 messages always serialize");
    let len = u32::try_from(out.len() - 4).unwrap_or(u32::MAX);
    out[..4].copy_from_slice(&len.to_be_bytes());
    out
}

/// Splits one JSON message off the front of `buf`: `Ok(None)` while
/// incomplete, else the bytes consumed and the JSON. A length above `max`
/// is refused as soon as the 4-byte prefix is in, before any buffering.
pub fn decode_json_frame(buf: &[u8], max: u32) -> Result<Option<(usize, &[u8])>, Iperf3Error> {
    let Some(prefix) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
    if len > max {
        return Err(Iperf3Error::TooLarge { len, max });
    }
    let end = 4 + len as usize;
    Ok(buf.get(4..end).map(|json| (end, json)))
}

/// The 4 bytes a client sends on each new UDP stream (3.12+ on a
/// little-endian host; a server ignores the content anyway).
pub const UDP_CONNECT_MSG: [u8; 4] = *b"9876";
/// The server's 4-byte answer (3.12+).
pub const UDP_CONNECT_REPLY: [u8; 4] = *b"6789";
/// What clients before 3.12 sent, as a host-order `u32`.
pub const UDP_CONNECT_MSG_LEGACY: u32 = 123_456_789;
/// What servers before 3.12 answered, as a host-order `u32`.
pub const UDP_CONNECT_REPLY_LEGACY: u32 = 987_654_321;

/// Whether a datagram is a server's answer to the UDP handshake: the 3.12+
/// bytes, or the legacy number in either byte order (the server's host
/// order need not be ours). In reverse mode a client may see up to two data
/// datagrams before it; those are longer than 4 bytes.
pub fn is_udp_connect_reply(d: &[u8]) -> bool {
    d == UDP_CONNECT_REPLY
        || d == UDP_CONNECT_REPLY_LEGACY.to_le_bytes()
        || d == UDP_CONNECT_REPLY_LEGACY.to_be_bytes()
}

/// Whether a datagram is a client's UDP handshake (new or legacy form).
pub fn is_udp_connect_msg(d: &[u8]) -> bool {
    d == UDP_CONNECT_MSG
        || d == UDP_CONNECT_MSG_LEGACY.to_le_bytes()
        || d == UDP_CONNECT_MSG_LEGACY.to_be_bytes()
}

/// Layout of the header at the front of every iperf3 UDP datagram:
/// `[u32 sec][u32 usec][u32 seq]`, or with `udp_counters_64bit`
/// `[u32 sec][u32 usec][u64 seq]`, all big-endian. Sequence numbers start
/// at 1; the time is the sender's clock, so only differences mean anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpHeader {
    pub counters_64bit: bool,
}

impl UdpHeader {
    pub const fn size(self) -> usize {
        if self.counters_64bit {
            16
        } else {
            12
        }
    }

    /// Writes datagram `seq` (1-based) sent at `send_ns` into the front of
    /// `buf`. A 32-bit sequence wraps as iperf3's does.
    ///
    /// # Panics
    /// If `buf` is shorter than [`UdpHeader::len`] (a sizing bug).
    pub fn write(self, buf: &mut [u8], seq: u64, send_ns: u64) {
        let sec = (send_ns / 1_000_000_000) as u32;
        let usec = ((send_ns % 1_000_000_000) / 1000) as u32;
        buf[..4].copy_from_slice(&sec.to_be_bytes());
        buf[4..8].copy_from_slice(&usec.to_be_bytes());
        if self.counters_64bit {
            buf[8..16].copy_from_slice(&seq.to_be_bytes());
        } else {
            buf[8..12].copy_from_slice(&(seq as u32).to_be_bytes());
        }
    }

    /// `(seq, send_ns)` of a received datagram; None if too short.
    pub fn read(self, buf: &[u8]) -> Option<(u64, u64)> {
        let b = buf.get(..self.size())?;
        let sec = u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        let usec = u64::from(u32::from_be_bytes([b[4], b[5], b[6], b[7]]));
        let seq = if self.counters_64bit {
            u64::from_be_bytes(b[8..16].try_into().ok()?)
        } else {
            u64::from(u32::from_be_bytes([b[8], b[9], b[10], b[11]]))
        };
        Some((seq, sec * 1_000_000_000 + usec * 1000))
    }
}

#[cfg(test)]
mod udp_header_tests {
    use super::UdpHeader;

    #[test]
    fn both_layouts_round_trip_at_microsecond_resolution() {
        for wide in [false, true] {
            let h = UdpHeader {
                counters_64bit: wide,
            };
            let mut buf = [0u8; 20];
            h.write(&mut buf, 7, 3_000_123_456);
            assert_eq!(&buf[..4], &3u32.to_be_bytes());
            assert_eq!(&buf[4..8], &123u32.to_be_bytes());
            assert_eq!(h.read(&buf), Some((7, 3_000_123_000)));
            assert_eq!(h.read(&buf[..h.size() - 1]), None);
        }
        let narrow = UdpHeader {
            counters_64bit: false,
        };
        let mut buf = [0u8; 12];
        narrow.write(&mut buf, (1u64 << 32) + 5, 0);
        assert_eq!(narrow.read(&buf), Some((5, 0)));
    }
}
