//! DCCP packet formats (RFC 4340 sec. 5): the generic header with long
//! (X=1) or short (X=0) sequence numbers, the acknowledgement subheader,
//! the ten packet types with their service codes and Reset codes, and the
//! checksum; parsing borrows, writing fills a caller's buffer.

use super::checksum::{self, Pseudo};
use super::options::Opt;
use super::seq::Seq;
use super::DccpError;

/// The packet types of sec. 5.1 (10..=15 are reserved and dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketType {
    Request = 0,
    Response = 1,
    Data = 2,
    Ack = 3,
    DataAck = 4,
    CloseReq = 5,
    Close = 6,
    Reset = 7,
    Sync = 8,
    SyncAck = 9,
}

impl PacketType {
    fn from_code(c: u8) -> Option<Self> {
        use PacketType::*;
        Some(match c {
            0 => Request,
            1 => Response,
            2 => Data,
            3 => Ack,
            4 => DataAck,
            5 => CloseReq,
            6 => Close,
            7 => Reset,
            8 => Sync,
            9 => SyncAck,
            _ => return None,
        })
    }
    /// Whether the type carries application data.
    pub fn has_data(self) -> bool {
        matches!(self, PacketType::Data | PacketType::DataAck)
    }
}

/// Reset Codes (sec. 5.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetCode {
    Unspecified,
    Closed,
    Aborted,
    NoConnection,
    PacketError,
    OptionError,
    MandatoryError,
    ConnectionRefused,
    BadServiceCode,
    TooBusy,
    BadInitCookie,
    AggressionPenalty,
    /// Reserved (12..=127) or CCID-specific (128..=255).
    Other(u8),
}

impl ResetCode {
    pub fn code(self) -> u8 {
        use ResetCode::*;
        match self {
            Unspecified => 0,
            Closed => 1,
            Aborted => 2,
            NoConnection => 3,
            PacketError => 4,
            OptionError => 5,
            MandatoryError => 6,
            ConnectionRefused => 7,
            BadServiceCode => 8,
            TooBusy => 9,
            BadInitCookie => 10,
            AggressionPenalty => 11,
            Other(c) => c,
        }
    }
    pub fn from_code(c: u8) -> Self {
        use ResetCode::*;
        match c {
            0 => Unspecified,
            1 => Closed,
            2 => Aborted,
            3 => NoConnection,
            4 => PacketError,
            5 => OptionError,
            6 => MandatoryError,
            7 => ConnectionRefused,
            8 => BadServiceCode,
            9 => TooBusy,
            10 => BadInitCookie,
            11 => AggressionPenalty,
            c => Other(c),
        }
    }
}

/// The type-specific part of the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    Request {
        service: u32,
    },
    Response {
        ack: Seq,
        service: u32,
    },
    Data,
    Ack {
        ack: Seq,
    },
    DataAck {
        ack: Seq,
    },
    CloseReq {
        ack: Seq,
    },
    Close {
        ack: Seq,
    },
    Reset {
        ack: Seq,
        code: ResetCode,
        data: [u8; 3],
    },
    Sync {
        ack: Seq,
    },
    SyncAck {
        ack: Seq,
    },
}

impl Body {
    pub fn packet_type(&self) -> PacketType {
        match self {
            Body::Request { .. } => PacketType::Request,
            Body::Response { .. } => PacketType::Response,
            Body::Data => PacketType::Data,
            Body::Ack { .. } => PacketType::Ack,
            Body::DataAck { .. } => PacketType::DataAck,
            Body::CloseReq { .. } => PacketType::CloseReq,
            Body::Close { .. } => PacketType::Close,
            Body::Reset { .. } => PacketType::Reset,
            Body::Sync { .. } => PacketType::Sync,
            Body::SyncAck { .. } => PacketType::SyncAck,
        }
    }
    /// The acknowledgement number, for types with an ack subheader.
    pub fn ack(&self) -> Option<Seq> {
        match *self {
            Body::Request { .. } | Body::Data => None,
            Body::Response { ack, .. }
            | Body::Ack { ack }
            | Body::DataAck { ack }
            | Body::CloseReq { ack }
            | Body::Close { ack }
            | Body::Reset { ack, .. }
            | Body::Sync { ack }
            | Body::SyncAck { ack } => Some(ack),
        }
    }
}

/// The fixed part of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub src_port: u16,
    pub dst_port: u16,
    /// CCID-specific 4 bits (CCID3's window counter).
    pub ccval: u8,
    /// Checksum Coverage, 0..=15 (sec. 9.2).
    pub cscov: u8,
    /// X: 48-bit numbers. Only Data, Ack and DataAck may be short.
    pub long: bool,
    pub seq: Seq,
    pub body: Body,
}

impl Header {
    /// Bytes the header takes before any option.
    pub fn len(&self) -> usize {
        let base = if self.long { 16 } else { 12 };
        let ack = match self.body.ack() {
            Some(_) if self.long => 8,
            Some(_) => 4,
            None => 0,
        };
        let extra = match self.body {
            Body::Request { .. } | Body::Response { .. } | Body::Reset { .. } => 4,
            _ => 0,
        };
        base + ack + extra
    }
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// A parsed packet borrowing its option area and payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    pub header: Header,
    /// The raw option area (iterate with [`super::options::Options`]).
    pub options: &'a [u8],
    pub payload: &'a [u8],
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([b[i], b[i + 1]])
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

fn u48_at(b: &[u8], i: usize) -> u64 {
    u64::from(u16_at(b, i)) << 32 | u64::from(u32_at(b, i + 2))
}

/// Parses a packet without checking its checksum (sec. 8.5 step 1 drops
/// bad offsets, reserved types and short numbers on other types).
/// Short (X=0) numbers come back as their 24 bits; extend them with
/// [`Seq::extend_short`].
pub fn parse(buf: &[u8]) -> Result<Packet<'_>, DccpError> {
    if buf.len() < 12 {
        return Err(DccpError::Truncated);
    }
    let data_offset = usize::from(buf[4]) * 4;
    let ccval = buf[5] >> 4;
    let cscov = buf[5] & 0x0F;
    let ptype = PacketType::from_code((buf[8] >> 1) & 0x0F).ok_or(DccpError::ReservedType)?;
    let long = buf[8] & 1 == 1;
    if !long
        && !matches!(
            ptype,
            PacketType::Data | PacketType::Ack | PacketType::DataAck
        )
    {
        return Err(DccpError::ShortSeqNotAllowed);
    }
    let (seq, mut p) = if long {
        if buf.len() < 16 {
            return Err(DccpError::Truncated);
        }
        (Seq::new(u48_at(buf, 10)), 16)
    } else {
        (Seq::new(u64::from(u32_at(buf, 8) & 0xFF_FFFF)), 12)
    };
    let mut need = |n: usize| -> Result<usize, DccpError> {
        let at = p;
        p += n;
        if p > buf.len() || p > data_offset {
            Err(DccpError::BadDataOffset)
        } else {
            Ok(at)
        }
    };
    let has_ack = !matches!(ptype, PacketType::Request | PacketType::Data);
    let ack = if has_ack {
        if long {
            let at = need(8)?;
            Seq::new(u48_at(buf, at + 2))
        } else {
            let at = need(4)?;
            Seq::new(u64::from(u32_at(buf, at) & 0xFF_FFFF))
        }
    } else {
        Seq::default()
    };
    let body = match ptype {
        PacketType::Request => Body::Request {
            service: u32_at(buf, need(4)?),
        },
        PacketType::Response => Body::Response {
            ack,
            service: u32_at(buf, need(4)?),
        },
        PacketType::Data => Body::Data,
        PacketType::Ack => Body::Ack { ack },
        PacketType::DataAck => Body::DataAck { ack },
        PacketType::CloseReq => Body::CloseReq { ack },
        PacketType::Close => Body::Close { ack },
        PacketType::Reset => {
            let at = need(4)?;
            Body::Reset {
                ack,
                code: ResetCode::from_code(buf[at]),
                data: [buf[at + 1], buf[at + 2], buf[at + 3]],
            }
        }
        PacketType::Sync => Body::Sync { ack },
        PacketType::SyncAck => Body::SyncAck { ack },
    };
    if data_offset < p || data_offset > buf.len() {
        return Err(DccpError::BadDataOffset);
    }
    Ok(Packet {
        header: Header {
            src_port: u16_at(buf, 0),
            dst_port: u16_at(buf, 2),
            ccval,
            cscov,
            long,
            seq,
            body,
        },
        options: &buf[p..data_offset],
        payload: &buf[data_offset..],
    })
}

/// Checks a received packet's checksum under its CsCov (sec. 9).
pub fn verify_checksum(buf: &[u8], pseudo: &Pseudo) -> Result<(), DccpError> {
    if buf.len() < 12 {
        return Err(DccpError::Truncated);
    }
    let offset = usize::from(buf[4]) * 4;
    let covered =
        checksum::covered_len(buf[5] & 0x0F, offset, buf.len()).ok_or(DccpError::BadCsCov)?;
    if offset < 12 || offset > buf.len() {
        return Err(DccpError::BadDataOffset);
    }
    if checksum::compute(pseudo, buf, covered) == u16_at(buf, 6) {
        Ok(())
    } else {
        Err(DccpError::BadChecksum)
    }
}

/// Writes one packet into a caller's buffer: header, then options, then
/// padding, payload and checksum in [`PacketWriter::finish`].
pub struct PacketWriter<'b> {
    buf: &'b mut [u8],
    pos: usize,
    cscov: u8,
}

impl<'b> PacketWriter<'b> {
    pub fn new(buf: &'b mut [u8], h: &Header) -> Result<Self, DccpError> {
        let len = h.len();
        if buf.len() < len {
            return Err(DccpError::BufferTooSmall);
        }
        if !h.long && !matches!(h.body, Body::Data | Body::Ack { .. } | Body::DataAck { .. }) {
            return Err(DccpError::ShortSeqNotAllowed);
        }
        let b = &mut buf[..len];
        b.fill(0);
        b[0..2].copy_from_slice(&h.src_port.to_be_bytes());
        b[2..4].copy_from_slice(&h.dst_port.to_be_bytes());
        b[5] = (h.ccval & 0x0F) << 4 | (h.cscov & 0x0F);
        let t = h.body.packet_type() as u8;
        let mut p;
        if h.long {
            b[8] = t << 1 | 1;
            b[10..16].copy_from_slice(&h.seq.get().to_be_bytes()[2..]);
            p = 16;
        } else {
            b[9..12].copy_from_slice(&h.seq.get().to_be_bytes()[5..]);
            b[8] = t << 1;
            p = 12;
        }
        if let Some(ack) = h.body.ack() {
            if h.long {
                b[p + 2..p + 8].copy_from_slice(&ack.get().to_be_bytes()[2..]);
                p += 8;
            } else {
                b[p + 1..p + 4].copy_from_slice(&ack.get().to_be_bytes()[5..]);
                p += 4;
            }
        }
        match h.body {
            Body::Request { service } | Body::Response { service, .. } => {
                b[p..p + 4].copy_from_slice(&service.to_be_bytes());
            }
            Body::Reset { code, data, .. } => {
                b[p] = code.code();
                b[p + 1..p + 4].copy_from_slice(&data);
            }
            _ => {}
        }
        Ok(PacketWriter {
            buf,
            pos: len,
            cscov: h.cscov,
        })
    }

    /// Appends one option.
    pub fn option(&mut self, o: &Opt<'_>) -> Result<(), DccpError> {
        let n = o.encode(&mut self.buf[self.pos..])?;
        self.pos += n;
        Ok(())
    }

    /// Appends already-encoded options.
    pub fn raw_options(&mut self, bytes: &[u8]) -> Result<(), DccpError> {
        let end = self.pos + bytes.len();
        self.buf
            .get_mut(self.pos..end)
            .ok_or(DccpError::BufferTooSmall)?
            .copy_from_slice(bytes);
        self.pos = end;
        Ok(())
    }

    /// Bytes still free for options and payload.
    pub fn room(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Pads the options to a word, appends the payload and fills in the
    /// data offset and checksum; returns the packet's length.
    pub fn finish(self, payload: &[u8], pseudo: &Pseudo) -> Result<usize, DccpError> {
        let offset = self.pos.next_multiple_of(4);
        if offset > 1020 {
            return Err(DccpError::OptionTooLong);
        }
        let total = offset + payload.len();
        let buf = self.buf.get_mut(..total).ok_or(DccpError::BufferTooSmall)?;
        buf[self.pos..offset].fill(0);
        buf[offset..].copy_from_slice(payload);
        buf[4] = (offset / 4) as u8;
        let covered =
            checksum::covered_len(self.cscov, offset, total).ok_or(DccpError::BadCsCov)?;
        let c = checksum::compute(pseudo, buf, covered);
        buf[6..8].copy_from_slice(&c.to_be_bytes());
        Ok(total)
    }
}

/// Writes `p` (header, raw options, payload) and returns its length.
pub fn write(p: &Packet<'_>, pseudo: &Pseudo, buf: &mut [u8]) -> Result<usize, DccpError> {
    let mut w = PacketWriter::new(buf, &p.header)?;
    w.raw_options(p.options)?;
    w.finish(p.payload, pseudo)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dccp::options::{Elapsed, FeatOp, Options};

    const PS: Pseudo = Pseudo::V4 {
        src: [192, 0, 2, 1],
        dst: [192, 0, 2, 2],
    };

    pub(crate) fn bodies() -> Vec<Body> {
        let ack = Seq::new(0xABCD_1234_5678);
        vec![
            Body::Request {
                service: 0x7866_6c62,
            },
            Body::Response { ack, service: 42 },
            Body::Data,
            Body::Ack { ack },
            Body::DataAck { ack },
            Body::CloseReq { ack },
            Body::Close { ack },
            Body::Reset {
                ack,
                code: ResetCode::BadServiceCode,
                data: [1, 2, 3],
            },
            Body::Sync { ack },
            Body::SyncAck { ack },
        ]
    }

    /// One real packet of every type, with options and payload.
    pub(crate) fn corpus() -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for (i, body) in bodies().into_iter().enumerate() {
            for long in [true, false] {
                let h = Header {
                    src_port: 5001,
                    dst_port: 40000 + i as u16,
                    ccval: (i % 16) as u8,
                    cscov: if i % 3 == 0 { 0 } else { 1 + (i % 2) as u8 },
                    long,
                    seq: Seq::new(if long {
                        0xFFFF_FFFF_FFF0 + i as u64
                    } else {
                        0xABCDEF
                    }),
                    body,
                };
                let mut buf = [0u8; 256];
                let Ok(mut w) = PacketWriter::new(&mut buf, &h) else {
                    assert!(!long);
                    continue;
                };
                w.option(&Opt::Timestamp(i as u32)).unwrap();
                w.option(&Opt::Feature {
                    op: FeatOp::ChangeL,
                    feature: 1,
                    value: &[2, 3],
                })
                .unwrap();
                w.option(&Opt::AckVector {
                    nonce: false,
                    cells: &[0x03, 0xC1, 0x40],
                })
                .unwrap();
                w.option(&Opt::TimestampEcho {
                    echo: 9,
                    elapsed: Elapsed::Short(77),
                })
                .unwrap();
                let n = w.finish(&[i as u8; 13], &PS).unwrap();
                out.push(buf[..n].to_vec());
            }
        }
        out
    }

    #[test]
    fn every_type_round_trips_long_and_short() {
        let c = corpus();
        // 10 long + the 3 types allowed short.
        assert_eq!(c.len(), 13);
        for bytes in &c {
            verify_checksum(bytes, &PS).unwrap();
            let p = parse(bytes).unwrap();
            assert_eq!(p.payload.len(), 13);
            assert_eq!(Options::new(p.options).filter_map(Result::ok).count(), 4);
            let mut again = [0u8; 256];
            let n = write(&p, &PS, &mut again).unwrap();
            assert_eq!(&again[..n], &bytes[..]);
            assert_eq!(parse(&again[..n]).unwrap(), p);
        }
    }

    #[test]
    fn header_fields_land_where_the_rfc_puts_them() {
        let h = Header {
            src_port: 0x1234,
            dst_port: 0x5678,
            ccval: 0xA,
            cscov: 0x3,
            long: true,
            seq: Seq::new(0x0102_0304_0506),
            body: Body::Response {
                ack: Seq::new(0x0A0B_0C0D_0E0F),
                service: 0xCAFE_BABE,
            },
        };
        let mut buf = [0u8; 64];
        let n = PacketWriter::new(&mut buf, &h)
            .unwrap()
            .finish(&[0; 8], &Pseudo::None)
            .unwrap();
        assert_eq!(n, 36);
        assert_eq!(buf[4], 7, "data offset in words");
        assert_eq!(buf[5], 0xA3);
        assert_eq!(buf[8], 1 << 1 | 1, "type 1, X=1");
        assert_eq!(&buf[10..16], &[1, 2, 3, 4, 5, 6]);
        assert_eq!(&buf[16..24], &[0, 0, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F]);
        assert_eq!(&buf[24..28], &[0xCA, 0xFE, 0xBA, 0xBE]);
    }

    #[test]
    fn checksum_coverage_excludes_the_uncovered_payload() {
        let h = Header {
            src_port: 1,
            dst_port: 2,
            ccval: 0,
            cscov: 1,
            long: true,
            seq: Seq::new(7),
            body: Body::Data,
        };
        let mut buf = [0u8; 64];
        let n = PacketWriter::new(&mut buf, &h)
            .unwrap()
            .finish(&[5; 20], &PS)
            .unwrap();
        buf[n - 1] ^= 0xFF;
        verify_checksum(&buf[..n], &PS).unwrap();
        buf[3] ^= 1;
        assert_eq!(verify_checksum(&buf[..n], &PS), Err(DccpError::BadChecksum));
        buf[3] ^= 1;
        let other = Pseudo::V4 {
            src: [192, 0, 2, 9],
            dst: [192, 0, 2, 2],
        };
        assert_eq!(
            verify_checksum(&buf[..n], &other),
            Err(DccpError::BadChecksum)
        );
        // CsCov past the end of the packet.
        buf[5] = 15;
        assert_eq!(verify_checksum(&buf[..n], &PS), Err(DccpError::BadCsCov));
    }

    #[test]
    fn invalid_headers_are_rejected() {
        let c = corpus();
        let mut b = c[0].clone();
        b[8] = 12 << 1 | 1;
        assert_eq!(parse(&b), Err(DccpError::ReservedType));
        let mut b = c[0].clone();
        b[8] &= !1; // Request with X=0
        assert_eq!(parse(&b), Err(DccpError::ShortSeqNotAllowed));
        let mut b = c[0].clone();
        b[4] = 2;
        assert_eq!(parse(&b), Err(DccpError::BadDataOffset));
        b[4] = 200;
        assert_eq!(parse(&b), Err(DccpError::BadDataOffset));
        assert_eq!(parse(&c[0][..11]), Err(DccpError::Truncated));
    }

    fn xorshift(s: &mut u64) -> u64 {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        *s
    }

    /// cargo-fuzz is not installed here, so a deterministic xorshift loop
    /// mutates real packets (bit flips, byte sets, truncation, extension)
    /// and feeds random bytes; parsing, option walking and checksum checks
    /// must return, never panic.
    #[test]
    fn hostile_bytes_never_panic() {
        let corpus = corpus();
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut parsed = 0;
        for round in 0..200_000 {
            let r = xorshift(&mut s);
            let mut b = if round % 10 == 0 {
                let n = (r % 80) as usize;
                (0..n).map(|_| xorshift(&mut s) as u8).collect()
            } else {
                corpus[(r % corpus.len() as u64) as usize].clone()
            };
            for _ in 0..1 + (r >> 8) % 4 {
                let x = xorshift(&mut s);
                if b.is_empty() {
                    break;
                }
                let i = (x % b.len() as u64) as usize;
                match (x >> 32) % 4 {
                    0 => b[i] ^= 1 << ((x >> 40) % 8),
                    1 => b[i] = (x >> 48) as u8,
                    2 => b.truncate(i),
                    _ => b.extend_from_slice(&[(x >> 24) as u8; 3]),
                }
            }
            let _ = verify_checksum(&b, &PS);
            if let Ok(p) = parse(&b) {
                parsed += 1;
                for o in Options::new(p.options) {
                    if let Ok((Opt::AckVector { cells, .. }, _)) = o {
                        let _ = crate::dccp::ackvec::Runs::new(Seq::new(5), cells).count();
                    }
                }
                let mut out = vec![0u8; b.len() + 8];
                if let Ok(n) = write(&p, &PS, &mut out) {
                    assert_eq!(parse(&out[..n]).unwrap(), p);
                }
            }
        }
        assert!(parsed > 10_000, "mutations still reach the option parser");
    }
}
