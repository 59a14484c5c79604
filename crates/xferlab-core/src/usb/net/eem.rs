//! CDC-EEM framing (USB CDC EEM 1.0). A transfer is a run of EEM packets,
//! each with a 2-byte little-endian header:
//! * data packet (bit 15 = 0): bit 14 bmCRC, bits 13..0 the length of the
//!   frame *including* its 4-byte trailer, which is the Ethernet CRC-32
//!   (little-endian) when bmCRC = 1, or the sentinel bytes DE AD BE EF when
//!   bmCRC = 0 (f_eem sends the sentinel, cdc_eem the CRC; both accept
//!   either);
//! * command packet (bit 15 = 1): bits 13..11 the command, bits 10..0 its
//!   parameter; Echo (0) and Echo Response (1) are followed by that many
//!   bytes of data. Commands are recognized, counted and skipped.
//!
//! A header of 0 is a zero-length EEM packet: the sender appends one when
//! the transfer would otherwise fill its last USB packet, so the transfer
//! still ends with a short packet and needs no ZLP.

use super::coalesce::Framing;
use super::{ethernet_crc, Decode, DecodeStats, ETH_HLEN};

const HLEN: usize = 2;
const TRAILER: usize = 4;
const SENTINEL: [u8; 4] = [0xde, 0xad, 0xbe, 0xef];
const TYPE_COMMAND: u16 = 1 << 15;
const CRC_BIT: u16 = 1 << 14;
/// Bits 13..0: the largest frame-plus-trailer a header can describe.
const LEN_MASK: u16 = 0x3fff;

/// EEM command codes (bits 13..11 of a command header).
pub const CMD_ECHO: u16 = 0;
pub const CMD_ECHO_RESPONSE: u16 = 1;

#[derive(Debug, Clone)]
pub struct EemFraming {
    max_packet: usize,
    crc: bool,
}

impl EemFraming {
    /// `crc`: carry a real CRC-32 (bmCRC = 1) or the sentinel.
    pub fn new(max_packet: usize, crc: bool) -> Self {
        EemFraming {
            max_packet: max_packet.max(1),
            crc,
        }
    }
}

/// The header of a data packet carrying a frame of `frame_len` bytes.
pub fn data_header(frame_len: usize, crc: bool) -> u16 {
    ((frame_len + TRAILER) as u16 & LEN_MASK) | if crc { CRC_BIT } else { 0 }
}

impl Framing for EemFraming {
    fn cost(&self, _used: usize, _frames: usize, frame_len: usize) -> Option<usize> {
        (frame_len >= ETH_HLEN && frame_len + TRAILER <= usize::from(LEN_MASK))
            .then_some(HLEN + frame_len + TRAILER)
    }
    fn close_cost(&self, _used: usize, _frames: usize) -> usize {
        HLEN
    }
    fn open(&mut self, _buf: &mut Vec<u8>) {}
    fn append(&mut self, buf: &mut Vec<u8>, frame: &[u8]) {
        buf.extend_from_slice(&data_header(frame.len(), self.crc).to_le_bytes());
        buf.extend_from_slice(frame);
        if self.crc {
            buf.extend_from_slice(&ethernet_crc(frame).to_le_bytes());
        } else {
            buf.extend_from_slice(&SENTINEL);
        }
    }
    fn close(&mut self, buf: &mut Vec<u8>) -> bool {
        if buf.len().is_multiple_of(self.max_packet) {
            buf.extend_from_slice(&[0, 0]);
        }
        false
    }
}

#[derive(Debug, Clone)]
pub struct EemDecoder {
    stats: DecodeStats,
    check_crc: bool,
}

impl Default for EemDecoder {
    fn default() -> Self {
        EemDecoder {
            stats: DecodeStats::default(),
            check_crc: true,
        }
    }
}

impl EemDecoder {
    /// A decoder that only counts frames and trusts their trailers (for
    /// captures, where the receiver checks them and the CRC costs CPU).
    pub fn counting() -> Self {
        EemDecoder {
            check_crc: false,
            ..EemDecoder::default()
        }
    }
}

impl Decode for EemDecoder {
    fn decode(&mut self, transfer: &[u8], frame: &mut dyn FnMut(&[u8])) {
        if transfer.is_empty() {
            return;
        }
        self.stats.transfers += 1;
        let mut rest = transfer;
        while !rest.is_empty() {
            let Some((h, body)) = rest.split_first_chunk::<HLEN>() else {
                self.stats.malformed += 1;
                return;
            };
            let header = u16::from_le_bytes(*h);
            if header & TYPE_COMMAND != 0 {
                self.stats.commands += 1;
                let cmd = (header >> 11) & 0x7;
                let param = usize::from(header & 0x7ff);
                let skip = if cmd == CMD_ECHO || cmd == CMD_ECHO_RESPONSE {
                    param
                } else {
                    0
                };
                if skip > body.len() {
                    self.stats.malformed += 1;
                    return;
                }
                rest = &body[skip..];
                continue;
            }
            if header == 0 {
                rest = body;
                continue;
            }
            let len = usize::from(header & LEN_MASK);
            if len < ETH_HLEN + TRAILER || len > body.len() {
                self.stats.malformed += 1;
                return;
            }
            let (data, trailer) = body[..len].split_at(len - TRAILER);
            let ok = if !self.check_crc {
                true
            } else if header & CRC_BIT != 0 {
                trailer == ethernet_crc(data).to_le_bytes()
            } else {
                trailer == SENTINEL
            };
            if ok {
                self.stats.frames += 1;
                self.stats.frame_bytes += data.len() as u64;
                frame(data);
            } else {
                self.stats.bad_crc += 1;
            }
            rest = &body[len..];
        }
    }
    fn stats(&self) -> &DecodeStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::time::Time;
    use crate::usb::net::{Coalescer, Limits, Push};

    fn frame(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(13) ^ seed)
            .collect()
    }

    fn limits(n: usize) -> Limits {
        Limits {
            max_frames: n,
            max_transfer: 16384,
            timeout: Duration::from_micros(200),
        }
    }

    fn decode_all(t: &[u8]) -> (Vec<Vec<u8>>, DecodeStats) {
        let mut d = EemDecoder::default();
        let mut got = Vec::new();
        d.decode(t, &mut |f| got.push(f.to_vec()));
        (got, *d.stats())
    }

    #[test]
    fn round_trip_crc_and_sentinel() {
        for crc in [true, false] {
            let mut c = Coalescer::new(EemFraming::new(512, crc), limits(6));
            let frames: Vec<_> = (0..6).map(|i| frame(60 + 211 * i, i as u8)).collect();
            for f in &frames {
                assert_eq!(c.push(Time::ZERO, f), Push::Added);
            }
            let t = c.poll_transfer(Time::ZERO).expect("6 frames close it");
            assert_eq!(t.frames, 6);
            let (got, st) = decode_all(&t.buf);
            assert_eq!(got, frames, "crc={crc}");
            assert_eq!((st.frames, st.malformed, st.bad_crc), (6, 0, 0));
        }
    }

    #[test]
    fn header_and_trailer_bytes_as_the_kernel_writes_them() {
        let f = frame(60, 9);
        let mut c = Coalescer::new(EemFraming::new(512, false), limits(1));
        c.push(Time::ZERO, &f);
        let t = c.poll_transfer(Time::ZERO).unwrap();
        // f_eem: put_unaligned_le16(len & 0x3FFF) with len = frame + 4, then be32 0xdeadbeef.
        assert_eq!(&t.buf[..2], &[64, 0]);
        assert_eq!(&t.buf[62..], &[0xde, 0xad, 0xbe, 0xef]);
        let mut c = Coalescer::new(EemFraming::new(512, true), limits(1));
        c.push(Time::ZERO, &f);
        let t = c.poll_transfer(Time::ZERO).unwrap();
        // cdc_eem: BIT(14) | len, then le32 of ~crc32_le(~0, frame).
        assert_eq!(u16::from_le_bytes([t.buf[0], t.buf[1]]), 0x4000 | 64);
        assert_eq!(&t.buf[62..], &crc32fast::hash(&f).to_le_bytes());
        // The standard CRC-32 check value, so the kernel's crc32_le agrees.
        assert_eq!(crc32fast::hash(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn a_corrupted_frame_is_dropped_and_its_neighbours_survive() {
        let mut c = Coalescer::new(EemFraming::new(512, true), limits(3));
        for i in 0..3 {
            c.push(Time::ZERO, &frame(100, i));
        }
        let mut t = c.poll_transfer(Time::ZERO).unwrap().buf;
        t[2 + 106 + 2 + 50] ^= 1; // inside the second frame
        let (got, st) = decode_all(&t);
        assert_eq!(got, vec![frame(100, 0), frame(100, 2)]);
        assert_eq!((st.bad_crc, st.malformed), (1, 0));
        // A sentinel packet with a wrong sentinel likewise.
        let mut c = Coalescer::new(EemFraming::new(512, false), limits(1));
        c.push(Time::ZERO, &frame(100, 0));
        let mut t = c.poll_transfer(Time::ZERO).unwrap().buf;
        t[103] = 0;
        assert_eq!(decode_all(&t).1.bad_crc, 1);
    }

    #[test]
    fn a_transfer_filling_its_last_packet_gets_a_zero_length_eem_packet() {
        // 2 + 506 + 4 = 512: the transfer would end on a packet boundary.
        let mut c = Coalescer::new(EemFraming::new(512, false), limits(1));
        c.push(Time::ZERO, &frame(506, 0));
        let t = c.poll_transfer(Time::ZERO).unwrap();
        assert!(!t.zlp);
        assert_eq!(t.buf.len(), 514);
        assert_eq!(&t.buf[512..], &[0, 0]);
        let (got, st) = decode_all(&t.buf);
        assert_eq!((got.len(), st.malformed), (1, 0));
    }

    #[test]
    fn commands_are_counted_and_skipped() {
        let f = frame(64, 3);
        let mut t = Vec::new();
        // Echo with 3 bytes of data, a tickle, an echo response with 2 bytes.
        t.extend_from_slice(&(0x8000u16 | 3).to_le_bytes());
        t.extend_from_slice(&[1, 2, 3]);
        t.extend_from_slice(&(0x8000u16 | (5 << 11)).to_le_bytes());
        t.extend_from_slice(&(0x8000u16 | (1 << 11) | 2).to_le_bytes());
        t.extend_from_slice(&[9, 9]);
        t.extend_from_slice(&data_header(64, true).to_le_bytes());
        t.extend_from_slice(&f);
        t.extend_from_slice(&crc32fast::hash(&f).to_le_bytes());
        let (got, st) = decode_all(&t);
        assert_eq!(got, vec![f]);
        assert_eq!((st.commands, st.malformed), (3, 0));
    }

    #[test]
    fn frames_per_transfer_limit_and_timeout() {
        let mut c = Coalescer::new(EemFraming::new(512, false), limits(2));
        let t0 = Time::ZERO;
        c.push(t0, &frame(100, 0));
        assert!(c.poll_transfer(t0).is_none(), "waits for company");
        assert_eq!(c.poll_timeout(), Some(t0 + Duration::from_micros(200)));
        assert!(c.poll_transfer(t0 + Duration::from_micros(199)).is_none());
        let t = c.poll_transfer(t0 + Duration::from_micros(200)).unwrap();
        assert_eq!(t.frames, 1, "the timeout sends a lone frame");
        c.recycle(t.buf);
        for i in 0..5 {
            let pushed = c.push(t0, &frame(100, i));
            if pushed == Push::Full {
                let t = c.poll_transfer(t0).unwrap();
                assert_eq!(t.frames, 2);
                assert_eq!(c.push(t0, &frame(100, i)), Push::Added);
            }
            if let Some(t) = c.poll_transfer(t0) {
                assert_eq!(t.frames, 2, "never more than the limit");
                assert_eq!(decode_all(&t.buf).0.len(), 2);
            }
        }
        assert_eq!(c.flush().unwrap().frames, 1);
        assert!(c.flush().is_none());
    }

    #[test]
    fn the_size_limit_closes_a_transfer_early() {
        let l = Limits {
            max_frames: 6,
            max_transfer: 3100,
            timeout: Duration::from_millis(1),
        };
        let mut c = Coalescer::new(EemFraming::new(512, true), l);
        assert_eq!(c.push(Time::ZERO, &frame(1514, 0)), Push::Added);
        assert_eq!(c.push(Time::ZERO, &frame(1514, 1)), Push::Added);
        assert_eq!(c.push(Time::ZERO, &frame(1514, 2)), Push::Full);
        let t = c.poll_transfer(Time::ZERO).unwrap();
        assert_eq!(t.frames, 2);
        assert!(t.buf.len() <= 3100);
        assert_eq!(c.push(Time::ZERO, &frame(1514, 2)), Push::Added);
    }

    #[test]
    fn malformed_headers_are_counted() {
        // Length beyond the transfer; a runt; a lone trailing byte.
        for bad in [
            &[0x40u8, 0x00, 1, 2][..],
            &[10, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
            &[0],
        ] {
            let (got, st) = decode_all(bad);
            assert!(got.is_empty());
            assert_eq!(st.malformed, 1, "{bad:?}");
        }
    }

    #[test]
    fn mutated_transfers_never_panic() {
        let mut c = Coalescer::new(
            EemFraming::new(512, true),
            Limits {
                max_frames: 3,
                max_transfer: 16384,
                timeout: Duration::ZERO,
            },
        );
        for i in 0..3 {
            c.push(Time::ZERO, &frame(64 + i, i as u8));
        }
        let good = c.poll_transfer(Time::ZERO).unwrap().buf;
        let mut d = EemDecoder::default();
        for pos in 0..good.len() {
            for v in [0u8, 0x3f, 0x40, 0x80, 0xff] {
                let mut m = good.clone();
                m[pos] = v;
                d.decode(&m, &mut |f| assert!(f.len() >= ETH_HLEN));
            }
        }
        for cut in 0..good.len() {
            d.decode(&good[..cut], &mut |_| {});
        }
        assert!(d.stats().malformed > 0 && d.stats().bad_crc > 0);
    }
}
