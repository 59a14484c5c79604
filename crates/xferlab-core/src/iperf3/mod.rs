//! The iperf3 control protocol as sans-IO state machines, so xferlab can
//! talk to stock iperf3 clients and servers (3.x; checked against byte
//! captures of 3.12 and 3.21 exchanges).
//!
//! Same shape as [`crate::proto`]: [`Iperf3Client`] and [`Iperf3Server`]
//! never touch a socket or a clock. The driver feeds them received bytes and
//! the current `Time`, writes out what `poll_transmit` returns, sleeps
//! until `poll_timeout`, and acts on the events from `poll_event`. Every wait
//! on the peer has a deadline, so a silent or half-open peer always ends in
//! an event rather than a hang.
//!
//! The wire format (see `wire`): a 37-byte cookie opens every TCP
//! connection, a state message is one signed byte, a JSON message is a
//! big-endian `u32` length and that many bytes of JSON. Parameters
//! ([`Params`]) go client -> server once; results ([`Results`]) go both ways
//! at the end.
//!
//! Compatibility stance: read leniently (like iperf3 3.12, which ignored
//! types and unknown keys, and printed negative integers as unsigned 64-bit
//! numbers), write strictly (like 3.18+ expects: booleans as `true`, numbers
//! as numbers, nothing written for unset options).

mod client;
pub mod convert;
pub mod export;
mod io;
pub mod json;
mod params;
mod results;
mod server;
pub mod wire;

use std::time::Duration;

pub use json::JsonError;

pub use client::{ClientEvent, Iperf3Client};
pub use params::{Direction, Params, Protocol, StreamInfo};
pub use results::{Omitted, Results, StreamResult};
pub use server::{Iperf3Server, ServerEvent};
pub use wire::{is_cookie, make_cookie, may_be_cookie, Cookie, State, UdpHeader, COOKIE_LEN};

/// How long each setup step may take (3.15+ times out every control read
/// after 10 s; we give the peer the same).
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a side may take to end the test and send its results JSON.
pub const RESULTS_TIMEOUT: Duration = Duration::from_secs(30);
/// Slack 3.12's server gives a running test past `time + omit` before it
/// gives up on the client; a sensible default for [`Params::watchdog`].
pub const WATCHDOG_GRACE: Duration = Duration::from_secs(40);
/// Bytes a peer may send while it should be waiting for us (for the driver
/// to open streams, decide on a request or produce results). More than
/// this is garbage.
pub const PAUSED_INPUT_LIMIT: usize = 64 * 1024;

/// The `id` of the stream created `index`-th (0-based). iperf3 numbers its
/// streams 1, 3, 4, 5, ...: id 2 is never used.
pub fn stream_id(index: usize) -> u32 {
    match index {
        0 => 1,
        i => u32::try_from(i).map_or(u32::MAX, |i| i.saturating_add(2)),
    }
}

/// Inverse of [`stream_id`]: the creation index of stream `id`, or `None`
/// for ids iperf3 never assigns (0 and 2).
pub fn stream_index(id: u32) -> Option<usize> {
    match id {
        1 => Some(0),
        0 | 2 => None,
        id => usize::try_from(id - 2).ok(),
    }
}

/// iperf3's `i_errno` codes that travel in SERVER_ERROR and that this
/// module sends or is likely to meet. The values below 100 grew between
/// versions; those listed here are stable since 3.x began, as are the
/// 100+ ones.
pub mod i_errno {
    pub const IEDURATION: i32 = 5;
    pub const IENUMSTREAMS: i32 = 6;
    pub const IEBLOCKSIZE: i32 = 7;
    pub const IEBUFSIZE: i32 = 8;
    pub const IEMSS: i32 = 10;
    pub const IEOMIT: i32 = 12;
    pub const IEUNIMP: i32 = 13;
    pub const IEBURST: i32 = 15;
    pub const IEUDPBLOCKSIZE: i32 = 20;
    pub const IEREVERSEBIDIR: i32 = 25;
    pub const IENEWTEST: i32 = 100;
    pub const IEINITTEST: i32 = 101;
    pub const IELISTEN: i32 = 102;
    pub const IECTRLREAD: i32 = 108;
    pub const IECTRLCLOSE: i32 = 109;
    pub const IEMESSAGE: i32 = 110;
    pub const IERECVMESSAGE: i32 = 112;
    pub const IERECVPARAMS: i32 = 114;
    pub const IERECVRESULTS: i32 = 117;
    pub const IECLIENTTERM: i32 = 119;
    pub const IESERVERTERM: i32 = 120;
    pub const IEACCESSDENIED: i32 = 121;
    pub const IEPROTOCOL: i32 = 131;
    pub const IEAFFINITY: i32 = 132;
    pub const IEAUTHTEST: i32 = 142;
    pub const IECREATESTREAM: i32 = 200;
    pub const IESTREAMACCEPT: i32 = 204;
    pub const IESTREAMID: i32 = 208;

    /// iperf3's own wording for the codes above, for messages to the user.
    pub fn describe(code: i32) -> Option<&'static str> {
        Some(match code {
            IEDURATION => "test duration too long",
            IENUMSTREAMS => "number of parallel streams too large",
            IEBLOCKSIZE => "block size too large",
            IEBUFSIZE => "socket buffer size too large",
            IEMSS => "MSS too large",
            IEOMIT => "bogus value for --omit",
            IEUNIMP => "not implemented yet",
            IEBURST => "invalid burst count",
            IEUDPBLOCKSIZE => "block size invalid",
            IEREVERSEBIDIR => "cannot be both reverse and bidirectional",
            IENEWTEST => "unable to create a new test",
            IEINITTEST => "test initialization failed",
            IELISTEN => "unable to start listener for connections",
            IECTRLREAD => "unable to read from the control socket",
            IECTRLCLOSE => "control socket has closed unexpectedly",
            IEMESSAGE => "received an unknown control message",
            IERECVMESSAGE => "unable to receive control message",
            IERECVPARAMS => "unable to receive parameters from client",
            IERECVRESULTS => "unable to receive results",
            IECLIENTTERM => "the client has terminated",
            IESERVERTERM => "the server has terminated",
            IEACCESSDENIED => "the server is busy running a test",
            IEPROTOCOL => "protocol does not exist",
            IEAUTHTEST => "test authorization failed",
            IECREATESTREAM => "unable to create a new stream",
            IESTREAMACCEPT => "unable to accept stream connection",
            IESTREAMID => "stream has an invalid id",
            _ => return None,
        })
    }
}

/// Why a session ended badly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Iperf3Error {
    /// The 37 bytes are not an iperf3 cookie.
    #[error("not an iperf3 cookie (36 characters from a-z2-7 and a NUL byte)")]
    BadCookie,
    /// Our own parameters JSON exceeds what 3.18+ servers accept.
    #[error("the parameters JSON is {len} bytes; iperf3 servers accept at most {max}")]
    ParamsTooLarge { len: usize, max: u32 },
    /// A JSON message longer than the limit for this step (checked on the
    /// length prefix, before buffering anything).
    #[error("iperf3 JSON message of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: u32, max: u32 },
    /// A JSON message that does not parse, lacks required keys or comes
    /// when none is due.
    #[error("malformed iperf3 message: {0}")]
    Malformed(#[from] JsonError),
    /// A state byte that is unknown or not allowed at this point.
    #[error("{}", unexpected_state(*got, during))]
    Unexpected { got: u8, during: &'static str },
    /// More bytes than [`PAUSED_INPUT_LIMIT`] while the peer should wait.
    #[error("the peer sent {len} unexpected bytes {during}")]
    Flooded { len: usize, during: &'static str },
    /// The peer closed the connection where it must not.
    #[error("the peer closed the iperf3 control connection {0}")]
    Closed(&'static str),
    /// A step took longer than its deadline.
    #[error("timed out {0}")]
    Timeout(&'static str),
}

fn unexpected_state(got: u8, during: &str) -> String {
    match State::from_byte(got) {
        Some(s) => format!("unexpected iperf3 state {} ({got}) {during}", s.name()),
        None => format!("unknown iperf3 control byte 0x{got:02x} {during}"),
    }
}

#[cfg(test)]
mod tests;
