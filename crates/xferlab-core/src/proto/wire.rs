//! Bytes on the wire: the connection preamble, the data-connection
//! attach record and length-prefixed JSON frames (docs/protocol.md).

use serde::{de::DeserializeOwned, Serialize};

use super::ProtoError;
use crate::outbox::Outbox;

/// Control-protocol version this build speaks. 2: the spec and the side
/// reports carry their pattern as an enum (result schema 2).
pub const VERSION: u16 = 2;

/// First four bytes of every xferlab connection. Upper case, so it can never
/// be mistaken for an iperf3 cookie (lower case and digits).
pub const MAGIC: [u8; 4] = *b"XFRL";
pub const PREAMBLE_LEN: usize = 8;
pub use crate::transport::attach::{Attach, ATTACH_LEN, TOKEN_LEN};

/// What a connection is for, from its preamble.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnKind {
    Control = 1,
    Data = 2,
    /// An order to an agent (`proto::order`). Servers from before agents
    /// close such a connection unanswered.
    Order = 3,
}

/// `MAGIC, u16 BE version, u8 kind, u8 reserved (0)`. Frozen across
/// versions so that two different versions can still tell each other so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preamble {
    pub version: u16,
    pub kind: ConnKind,
}

impl Preamble {
    pub fn new(kind: ConnKind) -> Self {
        Preamble {
            version: VERSION,
            kind,
        }
    }

    pub fn encode(&self) -> [u8; PREAMBLE_LEN] {
        let v = self.version.to_be_bytes();
        [
            MAGIC[0],
            MAGIC[1],
            MAGIC[2],
            MAGIC[3],
            v[0],
            v[1],
            self.kind as u8,
            0,
        ]
    }

    /// Parses a preamble. The version is *not* checked here: the caller
    /// answers a mismatch with an error frame that names both versions.
    pub fn decode(b: &[u8; PREAMBLE_LEN]) -> Result<Self, ProtoError> {
        if b[..4] != MAGIC {
            return Err(ProtoError::NotXferlab);
        }
        let version = u16::from_be_bytes([b[4], b[5]]);
        let kind = match b[6] {
            1 => ConnKind::Control,
            2 => ConnKind::Data,
            3 => ConnKind::Order,
            k => {
                return Err(ProtoError::Malformed(format!(
                    "unknown connection kind {k}"
                )))
            }
        };
        Ok(Preamble { version, kind })
    }
}

/// The server's one-byte answer to an [`Attach`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachReply {
    Ok = 0,
    UnknownSession = 1,
    BadFlow = 2,
    VersionMismatch = 3,
}

impl AttachReply {
    pub fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            0 => AttachReply::Ok,
            1 => AttachReply::UnknownSession,
            2 => AttachReply::BadFlow,
            3 => AttachReply::VersionMismatch,
            _ => return None,
        })
    }
    pub fn describe(self) -> &'static str {
        match self {
            AttachReply::Ok => "accepted",
            AttachReply::UnknownSession => {
                "the server does not know this test (it ended or timed out)"
            }
            AttachReply::BadFlow => "the server rejected the flow number",
            AttachReply::VersionMismatch => "the server speaks another protocol version",
        }
    }
}

pub fn token_hex(token: &[u8; TOKEN_LEN]) -> String {
    token.iter().map(|b| format!("{b:02x}")).collect()
}

/// Queues frames of xferlab's own protocol on an [`Outbox`]: the wire
/// format belongs here, the outbox below knows only bytes.
pub(crate) trait QueueFrame {
    /// Queues one length-prefixed JSON frame.
    fn queue_frame<T: Serialize>(&mut self, msg: &T);
}

impl<E> QueueFrame for Outbox<E> {
    fn queue_frame<T: Serialize>(&mut self, msg: &T) {
        self.send(&encode_frame(msg));
    }
}

/// A frame is `u32 BE length` followed by that many bytes of UTF-8 JSON.
pub fn encode_frame<T: Serialize>(msg: &T) -> Vec<u8> {
    let mut out = vec![0u8; 4];
    serde_json::to_writer(&mut out, msg).expect("messages always serialize");
    let len = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&len.to_be_bytes());
    out
}

/// Splits a byte stream into frames, refusing any frame longer than the
/// current limit before buffering it.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    max_len: u32,
}

impl FrameDecoder {
    pub fn new(max_len: u32) -> Self {
        FrameDecoder {
            buf: Vec::new(),
            max_len,
        }
    }

    pub fn set_max_len(&mut self, max_len: u32) {
        self.max_len = max_len;
    }

    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Bytes received but not yet part of a complete frame.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// The next complete frame's payload, if one is buffered.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, ProtoError> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
        if len > self.max_len {
            return Err(ProtoError::TooLarge {
                len,
                max: self.max_len,
            });
        }
        let end = 4 + len as usize;
        if self.buf.len() < end {
            return Ok(None);
        }
        let payload = self.buf[4..end].to_vec();
        self.buf.drain(..end);
        Ok(Some(payload))
    }
}

pub fn decode_json<T: DeserializeOwned>(payload: &[u8]) -> Result<T, ProtoError> {
    check_density(payload)?;
    serde_json::from_slice(payload).map_err(|e| {
        let mut msg = e.to_string();
        msg.truncate(200);
        ProtoError::Malformed(msg)
    })
}

/// Frames up to this size are parsed as they are: what they can cost is
/// small whatever their shape.
const DENSITY_FROM: usize = 64 * 1024;
/// The fewest bytes per JSON value a large frame may have. A report's
/// values are keyed numbers and strings: 15.9 to 19.0 bytes each in every
/// kind of test (stream TCP/UDP/DCCP/MPTCP, rr tcp/crr/udp, -P 4 to -F
/// 512). A frame of short strings or empty containers (`["","",...]`, 3
/// bytes a value) would cost ten times its size once parsed (a String or
/// Vec is 24 bytes before its contents); at 10 bytes a value it costs at
/// most about four times (eight with a vector's spare capacity).
const MIN_BYTES_PER_VALUE: usize = 10;

/// Refuses a large frame whose values are packed denser than any report,
/// before it is parsed: so no frame costs more than a small multiple of
/// its size (issue 34). Counts values as the separators and openings
/// outside strings (`,`, `[`, `{`), in one pass without allocating.
fn check_density(payload: &[u8]) -> Result<(), ProtoError> {
    if payload.len() <= DENSITY_FROM {
        return Ok(());
    }
    let (mut values, mut in_string, mut escaped) = (0usize, false, false);
    for &b in payload {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b',' | b'[' | b'{' => values += 1,
            _ => {}
        }
    }
    if values.saturating_mul(MIN_BYTES_PER_VALUE) > payload.len() {
        return Err(ProtoError::Malformed(format!(
            "a frame of {} bytes holds {values} values, more than one per {MIN_BYTES_PER_VALUE} bytes, which no report has: refused before parsing",
            payload.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_frames_denser_than_any_report_are_refused_before_parsing() {
        // 100 KiB of empty strings: refused, naming the density.
        let mut flood = br#"{"type":"results","report":{"warnings":["#.to_vec();
        while flood.len() < 100 * 1024 {
            flood.extend_from_slice(br#""","#);
        }
        flood.extend_from_slice(br#""""]}}"#);
        let e = decode_json::<serde_json::Value>(&flood).unwrap_err();
        assert!(e.to_string().contains("refused before parsing"), "{e}");
        // Commas and brackets inside strings are text, not values.
        let mut text = br#"{"warnings":[""#.to_vec();
        text.extend(std::iter::repeat_n(b',', 100 * 1024));
        text.extend_from_slice(br#"\",[{"]}"#);
        decode_json::<serde_json::Value>(&text).unwrap();
        // A real report's shape passes: keyed numbers.
        let mut report = br#"{"intervals":["#.to_vec();
        while report.len() < 100 * 1024 {
            report.extend_from_slice(br#"{"start_s":1.5,"end_s":2.0,"bytes":1310720},"#);
        }
        report.extend_from_slice(br#"{}]}"#);
        decode_json::<serde_json::Value>(&report).unwrap();
        // Small frames are parsed whatever their shape.
        decode_json::<serde_json::Value>(br#"[[],[],[],[]]"#).unwrap();
    }

    #[test]
    fn preamble_round_trip_and_garbage() {
        let p = Preamble::new(ConnKind::Data);
        assert_eq!(Preamble::decode(&p.encode()).unwrap(), p);
        assert_eq!(Preamble::decode(b"GET / HT"), Err(ProtoError::NotXferlab));
        // An iperf3 cookie starts with lower-case letters or digits 2-7.
        assert_eq!(Preamble::decode(b"abcdefgh"), Err(ProtoError::NotXferlab));
        assert!(matches!(
            Preamble::decode(b"XFRL\0\x01\x09\0"),
            Err(ProtoError::Malformed(_))
        ));
    }

    #[test]
    fn frames_split_across_reads_and_oversized_frames_are_refused_early() {
        let frame = encode_frame(&serde_json::json!({"type": "stop"}));
        let mut d = FrameDecoder::new(1024);
        for b in &frame[..frame.len() - 1] {
            d.push(std::slice::from_ref(b));
            assert_eq!(d.next_frame().unwrap(), None);
        }
        d.push(&frame[frame.len() - 1..]);
        assert_eq!(
            d.next_frame().unwrap().unwrap(),
            br#"{"type":"stop"}"#.to_vec()
        );
        let mut d = FrameDecoder::new(1024);
        d.push(&0x8000_0000u32.to_be_bytes());
        assert_eq!(
            d.next_frame(),
            Err(ProtoError::TooLarge {
                len: 0x8000_0000,
                max: 1024
            })
        );
    }

    #[test]
    fn attach_round_trip() {
        let a = Attach {
            token: [7; 16],
            flow: 300,
        };
        assert_eq!(Attach::decode(&a.encode()), a);
    }
}
