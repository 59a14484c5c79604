//! Received bytes not yet consumed, cut into whole iperf3 messages. (What
//! goes out, the events and the deadline live in the crate's `Outbox`.)

use super::wire::{decode_json_frame, State};
use super::Iperf3Error;

/// What the current state reads next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Expect {
    /// One state byte.
    State,
    /// A JSON message of at most `max` bytes.
    Json { max: u32 },
    /// Nothing until the driver acts; only the peer's signals (terminate,
    /// error) are read meanwhile.
    Paused,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Msg {
    Byte(u8),
    /// SERVER_ERROR with both of its int32s.
    ServerError {
        i_errno: i32,
        errno: i32,
    },
    Json(Vec<u8>),
}

/// Received bytes, consumed one whole message at a time.
#[derive(Debug, Default)]
pub(super) struct Inbox {
    buf: Vec<u8>,
}

impl Inbox {
    /// `signals`: state bytes the peer may send at any time (they are read
    /// even while paused or where a JSON message is due: as the first byte
    /// of a length they would announce more than any limit, see
    /// `signal_fits`). `server_error`: whether SERVER_ERROR's two int32s
    /// follow its byte (client side).
    pub fn next(
        &mut self,
        expect: Expect,
        signals: &[u8],
        server_error: bool,
    ) -> Result<Option<Msg>, Iperf3Error> {
        let Some(&b) = self.buf.first() else {
            return Ok(None);
        };
        let signal = signals.contains(&b);
        let json_max = match expect {
            Expect::State => None,
            Expect::Paused if !signal => return Ok(None),
            Expect::Paused => None,
            Expect::Json { max } if signal && signal_fits(b, max) => None,
            Expect::Json { max } => Some(max),
        };
        let Some(max) = json_max else {
            if server_error && b == State::ServerError.byte() {
                if self.buf.len() < 9 {
                    return Ok(None);
                }
                let i_errno = be_i32(&self.buf[1..5]);
                let errno = be_i32(&self.buf[5..9]);
                self.buf.drain(..9);
                return Ok(Some(Msg::ServerError { i_errno, errno }));
            }
            self.buf.drain(..1);
            return Ok(Some(Msg::Byte(b)));
        };
        match decode_json_frame(&self.buf, max) {
            Ok(Some((used, json))) => {
                let json = json.to_vec();
                self.buf.drain(..used);
                Ok(Some(Msg::Json(json)))
            }
            Ok(None) => Ok(None),
            Err(e) => match State::from_byte(b) {
                // A state byte where a JSON message is due (a length this
                // large cannot be meant): say so rather than "too large".
                Some(_) => Err(Iperf3Error::Unexpected {
                    got: b,
                    during: "where a JSON message was due",
                }),
                None => Err(e),
            },
        }
    }

    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    pub fn clear(&mut self) {
        self.buf = Vec::new();
    }
}

/// A signal byte read as a length prefix would announce more than `max`,
/// so reading it as a state loses nothing.
fn signal_fits(b: u8, max: u32) -> bool {
    (u64::from(b) << 24) > u64::from(max)
}

pub(super) fn be_i32(b: &[u8]) -> i32 {
    i32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
