//! CDC-NCM framing with 16-bit NTBs (USB CDC NCM 1.0, section 3). One
//! transfer is one NTB:
//! * NTH16 (12 bytes): "NCMH", wHeaderLength = 12, wSequence,
//!   wBlockLength (the NTB's length), wNdpIndex (the first NDP);
//! * datagrams, each starting at an offset with
//!   `offset % wNdpDivisor == wNdpPayloadRemainder`;
//! * NDP16: "NCM0" (or "NCM1" when each datagram carries a CRC-32),
//!   wLength (8 + 4 per entry, a multiple of 4, at least 16),
//!   wNextNdpIndex (0 = last NDP), then (wDatagramIndex, wDatagramLength)
//!   pairs ended by a (0, 0) entry. NDPs start on wNdpAlignment.
//!
//! The encoder writes its one NDP after the datagrams (as f_ncm does since
//! it aggregates), so it need not know the count in advance. When the NTB
//! would end on a packet boundary below the maximum size it appends one
//! zero byte instead of needing a ZLP (cdc_ncm's choice; f_ncm's parser
//! expects exactly that byte). The decoder follows the NDP chain of any
//! layout, and counts and drops what it cannot trust.

use super::coalesce::Framing;
use super::{ethernet_crc, Decode, DecodeStats, ETH_HLEN};

pub const NTH16_SIGN: [u8; 4] = *b"NCMH";
pub const NDP16_NOCRC_SIGN: [u8; 4] = *b"NCM0";
pub const NDP16_CRC_SIGN: [u8; 4] = *b"NCM1";
pub const NTH16_LEN: usize = 12;
const NDP16_HLEN: usize = 8;
const DPE16_LEN: usize = 4;
/// An NDP with one datagram and the terminating zero entry.
pub const NDP16_MIN_LEN: usize = NDP16_HLEN + 2 * DPE16_LEN;
/// NDPs followed per NTB before the decoder calls the chain a loop.
const MAX_NDPS: usize = 32;

/// One direction's NTB parameters (GET_NTB_PARAMETERS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NtbParams {
    /// dwNtb{In,Out}MaxSize.
    pub max_size: usize,
    /// wNdp{In,Out}Divisor and PayloadRemainder: datagram alignment.
    pub divisor: u16,
    pub remainder: u16,
    /// wNdp{In,Out}Alignment: where NDPs start.
    pub ndp_align: u16,
    /// wNtbOutMaxDatagrams (0 = no limit; IN has no such field).
    pub max_datagrams: u16,
}

impl NtbParams {
    /// What Linux's f_ncm announces for both directions (NTB_DEFAULT_IN_SIZE
    /// and NTB_OUT_SIZE are 16 KiB; divisor 4, remainder 0, alignment 4).
    pub const LINUX_GADGET: NtbParams = NtbParams {
        max_size: 16384,
        divisor: 4,
        remainder: 0,
        ndp_align: 4,
        max_datagrams: 0,
    };
}

/// The GET_NTB_PARAMETERS response (28 bytes, little-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NtbParameters {
    /// bmNtbFormatsSupported: bit 0 NTB16, bit 1 NTB32.
    pub formats: u16,
    pub host_in: NtbParams,
    pub host_out: NtbParams,
}

pub const NTB_PARAMETERS_LEN: usize = 28;

impl NtbParameters {
    pub fn parse(b: &[u8]) -> Option<NtbParameters> {
        let b: &[u8; NTB_PARAMETERS_LEN] = b.get(..NTB_PARAMETERS_LEN)?.try_into().ok()?;
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        if usize::from(u16_at(0)) < NTB_PARAMETERS_LEN {
            return None;
        }
        Some(NtbParameters {
            formats: u16_at(2),
            host_in: NtbParams {
                max_size: u32_at(4) as usize,
                divisor: u16_at(8),
                remainder: u16_at(10),
                ndp_align: u16_at(12),
                max_datagrams: 0,
            },
            host_out: NtbParams {
                max_size: u32_at(16) as usize,
                divisor: u16_at(20),
                remainder: u16_at(22),
                ndp_align: u16_at(24),
                max_datagrams: u16_at(26),
            },
        })
    }

    pub fn to_bytes(&self) -> [u8; NTB_PARAMETERS_LEN] {
        let mut b = [0u8; NTB_PARAMETERS_LEN];
        let put16 = |b: &mut [u8; NTB_PARAMETERS_LEN], i: usize, v: u16| {
            b[i..i + 2].copy_from_slice(&v.to_le_bytes())
        };
        put16(&mut b, 0, NTB_PARAMETERS_LEN as u16);
        put16(&mut b, 2, self.formats);
        b[4..8].copy_from_slice(&(self.host_in.max_size as u32).to_le_bytes());
        put16(&mut b, 8, self.host_in.divisor);
        put16(&mut b, 10, self.host_in.remainder);
        put16(&mut b, 12, self.host_in.ndp_align);
        b[16..20].copy_from_slice(&(self.host_out.max_size as u32).to_le_bytes());
        put16(&mut b, 20, self.host_out.divisor);
        put16(&mut b, 22, self.host_out.remainder);
        put16(&mut b, 24, self.host_out.ndp_align);
        put16(&mut b, 26, self.host_out.max_datagrams);
        b
    }
}

/// Bytes to add at `at` so that `(at + pad) % div == rem % div`.
fn pad_to(at: usize, div: u16, rem: u16) -> usize {
    let div = usize::from(div.max(1));
    (usize::from(rem) % div + div - at % div) % div
}

#[derive(Debug, Clone)]
pub struct NcmFraming {
    params: NtbParams,
    max_packet: usize,
    sequence: u16,
    /// (index, length) of the datagrams in the open NTB.
    entries: Vec<(u16, u16)>,
}

impl NcmFraming {
    /// NTBs for a receiver announcing `params` (its max size is the
    /// coalescer's `max_transfer`, at most 65535 for NTB16).
    pub fn new(params: NtbParams, max_packet: usize) -> Self {
        NcmFraming {
            params,
            max_packet: max_packet.max(1),
            sequence: 0,
            entries: Vec::with_capacity(64),
        }
    }

    fn ndp_len(frames: usize) -> usize {
        NDP16_HLEN + DPE16_LEN * (frames + 1)
    }
}

impl Framing for NcmFraming {
    fn cost(&self, used: usize, frames: usize, frame_len: usize) -> Option<usize> {
        // The first frame of a transfer also pays for the NTH.
        let (used, head) = if frames == 0 {
            (NTH16_LEN, NTH16_LEN)
        } else {
            (used, 0)
        };
        let pad = pad_to(used, self.params.divisor, self.params.remainder);
        (frame_len >= ETH_HLEN && used + pad + frame_len <= usize::from(u16::MAX))
            .then_some(head + pad + frame_len)
    }
    fn close_cost(&self, used: usize, frames: usize) -> usize {
        // NDP alignment, the NDP itself, and the possible pad byte.
        pad_to(used, self.params.ndp_align, 0) + Self::ndp_len(frames) + 1
    }
    fn open(&mut self, buf: &mut Vec<u8>) {
        self.entries.clear();
        buf.resize(NTH16_LEN, 0);
    }
    fn append(&mut self, buf: &mut Vec<u8>, frame: &[u8]) {
        let pad = pad_to(buf.len(), self.params.divisor, self.params.remainder);
        buf.resize(buf.len() + pad, 0);
        self.entries.push((buf.len() as u16, frame.len() as u16));
        buf.extend_from_slice(frame);
    }
    fn close(&mut self, buf: &mut Vec<u8>) -> bool {
        let pad = pad_to(buf.len(), self.params.ndp_align, 0);
        buf.resize(buf.len() + pad, 0);
        let ndp_index = buf.len();
        buf.extend_from_slice(&NDP16_NOCRC_SIGN);
        buf.extend_from_slice(&(Self::ndp_len(self.entries.len()) as u16).to_le_bytes());
        buf.extend_from_slice(&0u16.to_le_bytes());
        for &(i, l) in &self.entries {
            buf.extend_from_slice(&i.to_le_bytes());
            buf.extend_from_slice(&l.to_le_bytes());
        }
        buf.extend_from_slice(&[0; DPE16_LEN]);
        let block_len = buf.len();
        buf[0..4].copy_from_slice(&NTH16_SIGN);
        buf[4..6].copy_from_slice(&(NTH16_LEN as u16).to_le_bytes());
        buf[6..8].copy_from_slice(&self.sequence.to_le_bytes());
        buf[8..10].copy_from_slice(&(block_len as u16).to_le_bytes());
        buf[10..12].copy_from_slice(&(ndp_index as u16).to_le_bytes());
        self.sequence = self.sequence.wrapping_add(1);
        if block_len.is_multiple_of(self.max_packet) {
            buf.push(0);
        }
        false
    }
}

#[derive(Debug, Clone)]
pub struct NcmDecoder {
    max_ntb: usize,
    check_crc: bool,
    stats: DecodeStats,
}

impl NcmDecoder {
    /// Accepts NTBs of up to `max_ntb` bytes (what this side announced).
    pub fn new(max_ntb: usize) -> Self {
        NcmDecoder {
            max_ntb,
            check_crc: true,
            stats: DecodeStats::default(),
        }
    }

    /// Counts datagrams without checking NCM1 CRCs (for captures).
    pub fn counting() -> Self {
        NcmDecoder {
            check_crc: false,
            ..NcmDecoder::new(usize::from(u16::MAX))
        }
    }
}

fn u16_at(b: &[u8], i: usize) -> Option<usize> {
    b.get(i..i + 2)
        .map(|s| usize::from(u16::from_le_bytes([s[0], s[1]])))
}

impl Decode for NcmDecoder {
    fn decode(&mut self, transfer: &[u8], frame: &mut dyn FnMut(&[u8])) {
        if transfer.is_empty() {
            return;
        }
        self.stats.transfers += 1;
        let Some(ntb) = parse_nth16(transfer, self.max_ntb) else {
            self.stats.malformed += 1;
            return;
        };
        let mut ndp_index = ntb.ndp_index;
        for _ in 0..MAX_NDPS {
            let Some(ndp) = parse_ndp16(ntb.block, ndp_index) else {
                self.stats.malformed += 1;
                return;
            };
            let crc_len = if ndp.crc { 4 } else { 0 };
            for e in ndp.entries.chunks_exact(DPE16_LEN) {
                let index = usize::from(u16::from_le_bytes([e[0], e[1]]));
                let len = usize::from(u16::from_le_bytes([e[2], e[3]]));
                if index == 0 || len == 0 {
                    break;
                }
                let Some(d) = ntb
                    .block
                    .get(index..index + len)
                    .filter(|d| d.len() >= ETH_HLEN + crc_len && index >= NTH16_LEN)
                else {
                    self.stats.malformed += 1;
                    continue;
                };
                let (data, trailer) = d.split_at(d.len() - crc_len);
                if ndp.crc && self.check_crc && trailer != ethernet_crc(data).to_le_bytes() {
                    self.stats.bad_crc += 1;
                    continue;
                }
                self.stats.frames += 1;
                self.stats.frame_bytes += data.len() as u64;
                frame(data);
            }
            if ndp.next == 0 {
                return;
            }
            ndp_index = ndp.next;
        }
        // A chain longer than any real sender writes: a loop.
        self.stats.malformed += 1;
    }
    fn stats(&self) -> &DecodeStats {
        &self.stats
    }
}

struct Nth16<'a> {
    block: &'a [u8],
    ndp_index: usize,
}

fn parse_nth16(t: &[u8], max_ntb: usize) -> Option<Nth16<'_>> {
    if t.get(..4)? != NTH16_SIGN || u16_at(t, 4)? != NTH16_LEN {
        return None;
    }
    let block_len = u16_at(t, 8)?;
    if block_len > t.len() || block_len > max_ntb || block_len < NTH16_LEN {
        return None;
    }
    Some(Nth16 {
        block: &t[..block_len],
        ndp_index: u16_at(t, 10)?,
    })
}

struct Ndp16<'a> {
    crc: bool,
    next: usize,
    entries: &'a [u8],
}

fn parse_ndp16(block: &[u8], index: usize) -> Option<Ndp16<'_>> {
    // NCM 3.3: NDPs are 4-aligned and after the NTH.
    if index < NTH16_LEN || !index.is_multiple_of(4) {
        return None;
    }
    let sign = block.get(index..index + 4)?;
    let crc = if sign == NDP16_NOCRC_SIGN {
        false
    } else if sign == NDP16_CRC_SIGN {
        true
    } else {
        return None;
    };
    let len = u16_at(block, index + 4)?;
    if len < NDP16_MIN_LEN || len % 4 != 0 {
        return None;
    }
    let ndp = block.get(index..index + len)?;
    Some(Ndp16 {
        crc,
        next: u16_at(block, index + 6)?,
        entries: &ndp[NDP16_HLEN..],
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::time::Time;
    use crate::usb::net::{Coalescer, Limits, Push};

    fn frame(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    fn coalescer(n: usize, params: NtbParams) -> Coalescer<NcmFraming> {
        Coalescer::new(
            NcmFraming::new(params, 512),
            Limits {
                max_frames: n,
                max_transfer: params.max_size,
                timeout: Duration::from_micros(300),
            },
        )
    }

    fn decode_all(t: &[u8]) -> (Vec<Vec<u8>>, DecodeStats) {
        let mut d = NcmDecoder::new(65535);
        let mut got = Vec::new();
        d.decode(t, &mut |f| got.push(f.to_vec()));
        (got, *d.stats())
    }

    #[test]
    fn round_trip_and_layout() {
        let mut c = coalescer(10, NtbParams::LINUX_GADGET);
        let frames: Vec<_> = (0..10).map(|i| frame(54 + 97 * i, i as u8)).collect();
        for f in &frames {
            assert_eq!(c.push(Time::ZERO, f), Push::Added);
        }
        let t = c.poll_transfer(Time::ZERO).expect("10 frames close it");
        let b = &t.buf;
        assert_eq!(&b[..4], b"NCMH");
        assert_eq!(u16_at(b, 4), Some(12));
        let block = u16_at(b, 8).unwrap();
        assert!(block == b.len() || block + 1 == b.len());
        let ndp = u16_at(b, 10).unwrap();
        assert_eq!(ndp % 4, 0);
        assert_eq!(&b[ndp..ndp + 4], b"NCM0");
        assert_eq!(u16_at(b, ndp + 4), Some(8 + 4 * 11));
        for k in 0..10 {
            let idx = u16_at(b, ndp + 8 + 4 * k).unwrap();
            assert_eq!(idx % 4, 0, "datagram {k} aligned to the divisor");
        }
        assert_eq!(u16_at(b, ndp + 8 + 40), Some(0), "zero entry");
        let (got, st) = decode_all(b);
        assert_eq!(got, frames);
        assert_eq!((st.frames, st.malformed), (10, 0));
    }

    #[test]
    fn divisor_and_remainder_are_honoured() {
        let p = NtbParams {
            max_size: 8192,
            divisor: 16,
            remainder: 2,
            ndp_align: 8,
            max_datagrams: 0,
        };
        let mut c = coalescer(4, p);
        for i in 0..4 {
            c.push(Time::ZERO, &frame(61 + i, i as u8));
        }
        let t = c.poll_transfer(Time::ZERO).unwrap();
        let ndp = u16_at(&t.buf, 10).unwrap();
        assert_eq!(ndp % 8, 0);
        for k in 0..4 {
            assert_eq!(u16_at(&t.buf, ndp + 8 + 4 * k).unwrap() % 16, 2);
        }
        assert_eq!(decode_all(&t.buf).0.len(), 4);
    }

    #[test]
    fn ntb_size_limit_and_frame_limit() {
        let mut p = NtbParams::LINUX_GADGET;
        p.max_size = 4096;
        let mut c = coalescer(32, p);
        let mut n = 0;
        while c.push(Time::ZERO, &frame(1514, n)) == Push::Added {
            n += 1;
        }
        assert_eq!(
            n, 2,
            "two 1514 B frames and an NDP fit in 4096, three do not"
        );
        let t = c.poll_transfer(Time::ZERO).unwrap();
        assert!(t.buf.len() <= 4096);
        assert_eq!(decode_all(&t.buf).0.len(), 2);
    }

    #[test]
    fn an_ntb_ending_on_a_packet_boundary_gets_one_zero_byte() {
        // NTH 12 + frame + NDP 16 = 512 -> frame of 484 bytes.
        let mut c = coalescer(1, NtbParams::LINUX_GADGET);
        c.push(Time::ZERO, &frame(484, 0));
        let t = c.poll_transfer(Time::ZERO).unwrap();
        assert!(!t.zlp);
        assert_eq!(t.buf.len(), 513);
        assert_eq!(u16_at(&t.buf, 8), Some(512));
        assert_eq!(decode_all(&t.buf).0.len(), 1);
    }

    #[test]
    fn a_chain_of_ndps_and_crc_datagrams_decode() {
        // Hand-built: NTH, NDP "NCM1" at 12 -> NDP "NCM0" later, as cdc_ncm may chain.
        let f1 = frame(60, 1);
        let f2 = frame(70, 2);
        let mut b = vec![0u8; 12];
        let ndp1 = b.len();
        b.extend_from_slice(b"NCM1");
        b.extend_from_slice(&16u16.to_le_bytes());
        b.extend_from_slice(&[0, 0]); // next, patched below
        b.extend_from_slice(&[0; 8]); // entry + zero entry, patched
        let d1 = b.len();
        b.extend_from_slice(&f1);
        b.extend_from_slice(&crc32fast::hash(&f1).to_le_bytes());
        while !b.len().is_multiple_of(4) {
            b.push(0);
        }
        let ndp2 = b.len();
        b.extend_from_slice(b"NCM0");
        b.extend_from_slice(&16u16.to_le_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&[0; 8]);
        let d2 = b.len();
        b.extend_from_slice(&f2);
        let put = |b: &mut Vec<u8>, at: usize, v: usize| {
            b[at..at + 2].copy_from_slice(&(v as u16).to_le_bytes())
        };
        put(&mut b, ndp1 + 6, ndp2);
        put(&mut b, ndp1 + 8, d1);
        put(&mut b, ndp1 + 10, 64);
        put(&mut b, ndp2 + 8, d2);
        put(&mut b, ndp2 + 10, 70);
        b[..4].copy_from_slice(b"NCMH");
        put(&mut b, 4, 12);
        let len = b.len();
        put(&mut b, 8, len);
        put(&mut b, 10, ndp1);
        let (got, st) = decode_all(&b);
        assert_eq!(got, vec![f1.clone(), f2.clone()]);
        assert_eq!(st.malformed, 0);
        // A bad CRC drops that datagram only; a loop in the chain is caught.
        let mut bad = b.clone();
        bad[d1 + 5] ^= 0x40;
        let (got, st) = decode_all(&bad);
        assert_eq!((got, st.bad_crc), (vec![f2.clone()], 1));
        let mut looped = b.clone();
        put(&mut looped, ndp2 + 6, ndp1);
        let (_, st) = decode_all(&looped);
        assert_eq!(st.malformed, 1);
    }

    #[test]
    fn ntb_parameters_round_trip() {
        let p = NtbParameters {
            formats: 1,
            host_in: NtbParams::LINUX_GADGET,
            host_out: NtbParams {
                max_datagrams: 40,
                ..NtbParams::LINUX_GADGET
            },
        };
        let b = p.to_bytes();
        assert_eq!(&b[..8], &[28, 0, 1, 0, 0, 0x40, 0, 0]);
        assert_eq!(NtbParameters::parse(&b), Some(p));
        assert_eq!(NtbParameters::parse(&b[..27]), None);
    }

    /// Malformed NTBs (every single-byte mutation and every truncation of
    /// a valid one, plus pseudo-random bytes) never panic, never deliver a
    /// frame outside the transfer, and are counted.
    #[test]
    fn mutated_ntbs_never_panic() {
        let mut c = coalescer(4, NtbParams::LINUX_GADGET);
        for i in 0..4 {
            c.push(Time::ZERO, &frame(60 + 40 * i, i as u8));
        }
        let good = c.poll_transfer(Time::ZERO).unwrap().buf;
        let mut d = NcmDecoder::new(65535);
        let mut delivered = 0u64;
        for pos in 0..good.len() {
            for v in [0u8, 1, 0x7f, 0x80, 0xff, good[pos] ^ 4] {
                let mut m = good.clone();
                m[pos] = v;
                d.decode(&m, &mut |f| {
                    assert!(f.len() >= ETH_HLEN && f.len() <= m.len());
                    delivered += 1;
                });
            }
        }
        for cut in 0..good.len() {
            d.decode(&good[..cut], &mut |_| delivered += 1);
        }
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let len = (x % 700) as usize;
            let mut m = good.clone();
            m.truncate(len.max(12).min(m.len()));
            for b in m.iter_mut().skip(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if x.is_multiple_of(5) {
                    *b = x as u8;
                }
            }
            d.decode(&m, &mut |_| delivered += 1);
        }
        let st = d.stats();
        assert!(st.malformed > 1000, "{st:?}");
        assert_eq!(st.frames, delivered);
    }
}
