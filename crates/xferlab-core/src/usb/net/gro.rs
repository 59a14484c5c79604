//! Received TCP segments merged into super-frames before they go up a TAP
//! (opened with IFF_VNET_HDR): what the kernel's GRO does for a NIC, which
//! a TAP written one frame per write() does not get. Consecutive
//! in-order segments of one TCP flow, with the same headers but for
//! lengths, ids and checksums, become one packet of up to 64 KB with a
//! `virtio_net_hdr` that names it GSO TCP (segment size = the first
//! segment's payload) and its checksum partial. The stack above then runs
//! once per super-frame, not once per frame, and sends one ACK for it; the
//! link's thread writes once.
//!
//! Every segment's IP and TCP checksums are checked before it joins: a
//! super-frame's checksum is left partial (the kernel takes a partial
//! checksum as good), so a corrupt segment must not be hidden in one. A
//! segment that fails, or cannot join (flags other than ACK/PSH, no
//! payload, IP options, fragments, out of order, other options bytes), goes
//! up as it came; one of the held flow first flushes it, to keep the
//! flow's order. Only one flow is held at a time: frames of other flows
//! that cannot join pass it by (order across flows does not matter).
//!
//! The driver calls [`Merger::push`] per received frame and
//! [`Merger::flush`] before it sleeps, as NAPI flushes GRO at the end of a
//! poll, so merging adds no wait.

use super::gso::{csum_add, F_NEEDS_CSUM, GSO_TCPV4, GSO_TCPV6, VNET_HDR_LEN};

const TCP_ACK: u8 = 0x10;
const TCP_PSH: u8 = 0x08;
/// The largest IPv4 total length and IPv6 payload length.
const IP_MAX: usize = 65535;
/// Ethernet header (no VLAN tag: tagged frames pass through).
const ETH: usize = 14;

/// The `virtio_net_hdr` of a packet that asks for nothing.
pub const PLAIN_HDR: [u8; VNET_HDR_LEN] = [0; VNET_HDR_LEN];

/// What the merger did.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
pub struct GroStats {
    /// Frames pushed.
    pub frames: u64,
    /// Packets handed up (merged or passed through).
    pub packets: u64,
    /// Of `packets`, super-frames of two frames or more.
    pub super_frames: u64,
    /// Frames that went up inside those super-frames.
    pub merged: u64,
    /// TCP segments whose IP or TCP checksum was wrong (passed through
    /// as they came, for the kernel to drop and count).
    pub bad_csum: u64,
}

/// One parsed segment that may join a super-frame.
#[derive(Debug, Clone, Copy)]
struct Seg {
    v6: bool,
    /// Offsets in the frame: TCP header, end of headers, end of the IP packet.
    l4: usize,
    hdr_end: usize,
    ip_end: usize,
    flags: u8,
    seq: u32,
}

impl Seg {
    fn payload(&self) -> usize {
        self.ip_end - self.hdr_end
    }
}

/// The flow being merged: its headers and payload sit in `Merger::buf`
/// behind room for the virtio_net_hdr.
#[derive(Debug, Clone, Copy)]
struct Held {
    seg: Seg,
    /// Payload bytes per segment (the first's).
    mss: usize,
    next_seq: u32,
    segs: u32,
    /// No segment may join any more (PSH, or a short one).
    closed: bool,
}

/// Merges received TCP segments; see the module's documentation.
#[derive(Debug)]
pub struct Merger {
    buf: Vec<u8>,
    held: Option<Held>,
    pub stats: GroStats,
}

impl Default for Merger {
    fn default() -> Self {
        Merger {
            buf: Vec::with_capacity(VNET_HDR_LEN + ETH + 60 + IP_MAX),
            held: None,
            stats: GroStats::default(),
        }
    }
}

impl Merger {
    /// Takes one received Ethernet frame; calls `up(vnet_hdr, frame)` for
    /// every packet that is ready to go up (none, one or two).
    pub fn push(&mut self, frame: &[u8], up: &mut dyn FnMut(&[u8], &[u8])) {
        self.stats.frames += 1;
        let Some(s) = self.parse(frame) else {
            if self.same_flow_as_held(frame) {
                self.flush(up);
            }
            self.pass(frame, up);
            return;
        };
        if let Some(h) = self.held {
            if self.joins(&h, &s, frame) {
                self.append(h, s, frame);
                return;
            }
            self.flush(up);
        }
        self.hold(s, frame);
    }

    /// Hands up the held super-frame, if any.
    pub fn flush(&mut self, up: &mut dyn FnMut(&[u8], &[u8])) {
        let Some(h) = self.held.take() else { return };
        self.stats.packets += 1;
        if h.segs == 1 {
            // Unchanged, checksums as they came.
            up(&PLAIN_HDR, &self.buf[VNET_HDR_LEN..]);
            return;
        }
        self.stats.super_frames += 1;
        self.stats.merged += u64::from(h.segs);
        let (b, s) = (&mut self.buf, h.seg);
        let f = VNET_HDR_LEN;
        let ip_end = b.len() - f;
        let ip_len = ip_end - ETH;
        let tcp_len = ip_end - s.l4;
        let addrs = if s.v6 {
            b[f + ETH + 4..f + ETH + 6].copy_from_slice(&((ip_len - 40) as u16).to_be_bytes());
            f + ETH + 8..f + ETH + 40
        } else {
            b[f + ETH + 2..f + ETH + 4].copy_from_slice(&(ip_len as u16).to_be_bytes());
            b[f + ETH + 10..f + ETH + 12].fill(0);
            let c = !csum_add(0, &b[f + ETH..f + s.l4]);
            b[f + ETH + 10..f + ETH + 12].copy_from_slice(&c.to_be_bytes());
            f + ETH + 12..f + ETH + 20
        };
        // A partial checksum: the field holds the pseudo-header's sum, as
        // the kernel leaves it for a device to finish.
        let pseudo = csum_add(6 + tcp_len as u32, &b[addrs]);
        b[f + s.l4 + 16..f + s.l4 + 18].copy_from_slice(&pseudo.to_be_bytes());
        let gso = if s.v6 { GSO_TCPV6 } else { GSO_TCPV4 };
        let mut hdr = [0u8; VNET_HDR_LEN];
        hdr[0] = F_NEEDS_CSUM;
        hdr[1] = gso;
        hdr[2..4].copy_from_slice(&(s.hdr_end as u16).to_le_bytes());
        hdr[4..6].copy_from_slice(&(h.mss as u16).to_le_bytes());
        hdr[6..8].copy_from_slice(&(s.l4 as u16).to_le_bytes());
        hdr[8..10].copy_from_slice(&16u16.to_le_bytes());
        b[..f].copy_from_slice(&hdr);
        up(&b[..f], &b[f..]);
    }

    fn pass(&mut self, frame: &[u8], up: &mut dyn FnMut(&[u8], &[u8])) {
        self.stats.packets += 1;
        up(&PLAIN_HDR, frame);
    }

    fn hold(&mut self, s: Seg, frame: &[u8]) {
        self.buf.clear();
        self.buf.extend_from_slice(&PLAIN_HDR);
        self.buf.extend_from_slice(&frame[..s.ip_end]);
        self.held = Some(Held {
            seg: s,
            mss: s.payload(),
            next_seq: s.seq.wrapping_add(s.payload() as u32),
            segs: 1,
            closed: s.flags & TCP_PSH != 0,
        });
    }

    fn append(&mut self, mut h: Held, s: Seg, frame: &[u8]) {
        self.buf.extend_from_slice(&frame[s.hdr_end..s.ip_end]);
        h.segs += 1;
        h.next_seq = h.next_seq.wrapping_add(s.payload() as u32);
        if s.flags & TCP_PSH != 0 {
            self.buf[VNET_HDR_LEN + h.seg.l4 + 13] |= TCP_PSH;
        }
        h.closed = s.flags & TCP_PSH != 0 || s.payload() < h.mss;
        self.held = Some(h);
    }

    /// Whether `s` (of `frame`) continues the held super-frame.
    fn joins(&self, h: &Held, s: &Seg, frame: &[u8]) -> bool {
        let held = &self.buf[VNET_HDR_LEN..];
        let hs = &h.seg;
        if h.closed
            || s.v6 != hs.v6
            || s.hdr_end != hs.hdr_end
            || s.seq != h.next_seq
            || s.payload() > h.mss
            || held.len() - ETH + s.payload() > IP_MAX + if s.v6 { 40 } else { 0 }
        {
            return false;
        }
        // Ethernet addresses and type; IP fields that must match (IPv4:
        // TOS, DF, TTL, protocol, addresses; IPv6: version, class, flow
        // label, next header, hop limit, addresses); TCP ports, ack,
        // flags but PSH, window, urgent pointer and options.
        let same = |a: usize, b: usize| frame[a..b] == held[a..b];
        let ip = ETH;
        let ip_same = if s.v6 {
            same(ip, ip + 4) && same(ip + 6, ip + 40)
        } else {
            same(ip, ip + 2)
                && frame[ip + 6] == held[ip + 6]
                && same(ip + 8, ip + 10)
                && same(ip + 12, ip + 20)
        };
        let t = s.l4;
        same(0, ETH)
            && ip_same
            && same(t, t + 4)
            && same(t + 8, t + 12)
            && frame[t + 12] == held[t + 12]
            && (frame[t + 13] | TCP_PSH) == (held[t + 13] | TCP_PSH)
            && same(t + 14, t + 16)
            && same(t + 18, s.hdr_end)
    }

    /// Whether a frame that cannot join belongs to the held flow (so the
    /// held data must go up first).
    fn same_flow_as_held(&self, frame: &[u8]) -> bool {
        let Some(h) = self.held else { return false };
        let held = &self.buf[VNET_HDR_LEN..];
        let (ip, t) = (ETH, h.seg.l4);
        let addrs = if h.seg.v6 {
            ip + 8..ip + 40
        } else {
            ip + 12..ip + 20
        };
        frame.len() >= t + 4
            && frame[12..14] == held[12..14]
            && frame[addrs.clone()] == held[addrs]
            && frame[t..t + 4] == held[t..t + 4]
    }

    /// The segment `frame` carries, if it is one that may join a
    /// super-frame and its checksums are right.
    fn parse(&mut self, frame: &[u8]) -> Option<Seg> {
        let ip = ETH;
        let (v6, l4, ip_end) = match u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]) {
            0x0800 => {
                let h = frame.get(ip..ip + 20)?;
                let tot = usize::from(u16::from_be_bytes([h[2], h[3]]));
                // Version 4, no options, DF and no fragment, TCP.
                if h[0] != 0x45
                    || h[6] & 0x7f != 0x40
                    || h[7] != 0
                    || h[9] != 6
                    || tot < 40
                    || ip + tot > frame.len()
                {
                    return None;
                }
                (false, ip + 20, ip + tot)
            }
            0x86dd => {
                let h = frame.get(ip..ip + 40)?;
                let end = ip + 40 + usize::from(u16::from_be_bytes([h[4], h[5]]));
                if h[0] >> 4 != 6 || h[6] != 6 || end > frame.len() {
                    return None;
                }
                (true, ip + 40, end)
            }
            _ => return None,
        };
        let t = frame.get(l4..l4 + 20)?;
        let hdr_end = l4 + usize::from(t[12] >> 4) * 4;
        let flags = t[13];
        if hdr_end - l4 < 20
            || hdr_end >= ip_end
            || flags & !TCP_PSH != TCP_ACK
            || t[12] & 0x0f != 0
        {
            return None;
        }
        let addrs = if v6 {
            &frame[ip + 8..ip + 40]
        } else {
            &frame[ip + 12..ip + 20]
        };
        let pseudo = u32::from(csum_add(6 + (ip_end - l4) as u32, addrs));
        let ip_ok = v6 || csum_add(0, &frame[ip..l4]) == 0xffff;
        if !ip_ok || csum_add(pseudo, &frame[l4..ip_end]) != 0xffff {
            self.stats.bad_csum += 1;
            return None;
        }
        Some(Seg {
            v6,
            l4,
            hdr_end,
            ip_end,
            flags,
            seq: u32::from_be_bytes([t[4], t[5], t[6], t[7]]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::gso::{tests::tcp4, tests::vnet, Segmenter, GSO_NONE};
    use super::*;

    /// Whether a packet handed up (virtio_net_hdr first) is a super-frame.
    fn is_super_frame(p: &[u8]) -> bool {
        p[1] != GSO_NONE
    }

    /// Cuts a super-frame of `payload` into MSS frames with the segmenter
    /// (each with its own, correct checksums).
    fn frames(payload: &[u8], flags: u8, mss: u16) -> Vec<Vec<u8>> {
        let mut pkt = vnet(F_NEEDS_CSUM, GSO_TCPV4, mss, 34, 16);
        pkt.extend_from_slice(&tcp4(payload, flags));
        let mut s = Segmenter::default();
        assert!(s.start(&pkt));
        let mut out = vec![0u8; 4096];
        let mut got = Vec::new();
        while let Some(n) = s.next(&pkt, &mut out) {
            got.push(out[..n].to_vec());
        }
        got
    }

    fn push_all(m: &mut Merger, fs: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let mut up = Vec::new();
        for f in fs {
            m.push(f, &mut |h, f| up.push([h, f].concat()));
        }
        m.flush(&mut |h, f| up.push([h, f].concat()));
        up
    }

    #[test]
    fn segments_merge_into_one_super_frame_that_cuts_back_into_them() {
        let payload: Vec<u8> = (0..10_000u32).map(|i| (i * 31 % 251) as u8).collect();
        let fs = frames(&payload, TCP_PSH, 1448);
        assert_eq!(fs.len(), 7);
        let mut m = Merger::default();
        let up = push_all(&mut m, &fs);
        assert_eq!(up.len(), 1, "one super-frame");
        let p = &up[0];
        assert!(is_super_frame(p));
        assert_eq!(p[1], GSO_TCPV4);
        assert_eq!(u16::from_le_bytes([p[4], p[5]]), 1448, "gso_size");
        assert_eq!(u16::from_le_bytes([p[2], p[3]]), 66, "hdr_len");
        assert_eq!(p.len(), VNET_HDR_LEN + 66 + payload.len());
        // The kernel's (and our) segmentation gives back the same frames,
        // checksums and all: the super-frame is what TSO would have sent.
        let mut s = Segmenter::default();
        assert!(s.start(p));
        let mut out = vec![0u8; 4096];
        let mut again = Vec::new();
        while let Some(n) = s.next(p, &mut out) {
            again.push(out[..n].to_vec());
        }
        assert_eq!(again.len(), fs.len());
        for (i, (a, b)) in again.iter().zip(&fs).enumerate() {
            // The IPv4 id of the cut frames counts from the first's, as
            // the segmenter's input did.
            assert_eq!(a, b, "frame {i}");
        }
        assert_eq!(
            m.stats,
            GroStats {
                frames: 7,
                packets: 1,
                super_frames: 1,
                merged: 7,
                bad_csum: 0
            }
        );
    }

    #[test]
    fn tcpv6_segments_merge_and_cut_back_the_same() {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xdd];
        f.extend_from_slice(&[0x60, 0, 0, 0, 0, 0, 6, 64]);
        f.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        f.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        f.extend_from_slice(&[
            0x30, 0x39, 0x14, 0x51, 0, 0, 0, 5, 0, 0, 0, 7, 0x50, 0x10, 1, 0, 0, 0, 0, 0,
        ]);
        f.extend((0..5000u32).map(|i| (i % 253) as u8));
        let mut pkt = vnet(F_NEEDS_CSUM, GSO_TCPV6, 1200, 54, 16);
        pkt.extend_from_slice(&f);
        let cut = |pkt: &[u8]| {
            let mut s = Segmenter::default();
            assert!(s.start(pkt));
            let mut out = vec![0u8; 2048];
            let mut got = Vec::new();
            while let Some(n) = s.next(pkt, &mut out) {
                got.push(out[..n].to_vec());
            }
            got
        };
        let fs = cut(&pkt);
        assert_eq!(fs.len(), 5);
        let up = push_all(&mut Merger::default(), &fs);
        assert_eq!(up.len(), 1);
        assert_eq!(up[0][1], GSO_TCPV6);
        assert_eq!(cut(&up[0]), fs);
    }

    #[test]
    fn a_super_frame_stops_at_64k_and_at_a_short_or_pushed_segment() {
        let payload = vec![7u8; 100 * 1448];
        let fs = frames(&payload, 0, 1448);
        let mut m = Merger::default();
        let up = push_all(&mut m, &fs);
        // 45 x 1448 payload + 52 bytes of IP and TCP headers fit in 65535.
        assert_eq!(up.len(), 3);
        for p in &up {
            assert!(p.len() - VNET_HDR_LEN - ETH <= IP_MAX);
        }
        assert_eq!(up[0].len(), VNET_HDR_LEN + 66 + 45 * 1448);
        // A PSH segment ends the super-frame it joins.
        let a = frames(&[1u8; 2896], TCP_PSH, 1448);
        let mut b = frames(&[2u8; 1448], 0, 1448);
        // b continues a's sequence.
        let seq = 1000u32 + 2896;
        b[0][38..42].copy_from_slice(&seq.to_be_bytes());
        fix_tcp_csum(&mut b[0]);
        let up = push_all(&mut Merger::default(), &[a.clone(), b].concat());
        assert_eq!(up.len(), 2);
        assert!(is_super_frame(&up[0]) && !is_super_frame(&up[1]));
        assert_ne!(up[0][VNET_HDR_LEN + 47] & TCP_PSH, 0, "PSH kept");
    }

    fn fix_tcp_csum(f: &mut [u8]) {
        f[50..52].fill(0);
        let pseudo = u32::from(csum_add(6 + (f.len() - 34) as u32, &f[26..34]));
        let c = !csum_add(pseudo, &f[34..]);
        f[50..52].copy_from_slice(&c.to_be_bytes());
    }

    #[test]
    fn what_cannot_join_goes_up_as_it_came_and_in_order() {
        let fs = frames(&[3u8; 4344], 0, 1448);
        // Out of order: the third segment before the second.
        let up = push_all(
            &mut Merger::default(),
            &[fs[0].clone(), fs[2].clone(), fs[1].clone()],
        );
        assert_eq!(up.len(), 3);
        for (p, f) in up.iter().zip([&fs[0], &fs[2], &fs[1]]) {
            assert_eq!(&p[..VNET_HDR_LEN], &PLAIN_HDR);
            assert_eq!(&p[VNET_HDR_LEN..], &f[..]);
        }
        // A pure ACK of the held flow flushes it first; a FIN is not merged.
        let ack = tcp4(&[], 0);
        let fin = frames(&[4u8; 10], 0x01, 1448);
        let up = push_all(
            &mut Merger::default(),
            &[fs[0].clone(), fs[1].clone(), ack.clone(), fin[0].clone()],
        );
        assert_eq!(up.len(), 3);
        assert!(is_super_frame(&up[0]));
        assert_eq!(&up[1][VNET_HDR_LEN..], &ack[..]);
        assert_eq!(&up[2][VNET_HDR_LEN..], &fin[0][..]);
        // Another flow's pure ACK passes the held flow by.
        let mut other = ack.clone();
        other[34] ^= 1;
        let up = push_all(
            &mut Merger::default(),
            &[fs[0].clone(), other.clone(), fs[1].clone()],
        );
        assert_eq!(up.len(), 2);
        assert_eq!(&up[0][VNET_HDR_LEN..], &other[..]);
        assert!(is_super_frame(&up[1]));
    }

    #[test]
    fn a_corrupt_segment_is_never_hidden_in_a_super_frame() {
        let mut fs = frames(&[5u8; 4344], 0, 1448);
        fs[1][100] ^= 0xff;
        let mut m = Merger::default();
        let up = push_all(&mut m, &fs);
        assert_eq!(
            up.len(),
            3,
            "held, corrupt one as it came, then the next alone"
        );
        assert_eq!(&up[1][VNET_HDR_LEN..], &fs[1][..]);
        assert_eq!(m.stats.bad_csum, 1);
        assert_eq!(m.stats.merged, 0);
    }

    #[test]
    fn garbage_never_panics_and_passes_through() {
        let mut m = Merger::default();
        let base = frames(&[9u8; 3000], 0, 1448);
        let mut n = 0;
        for len in 0..base[0].len() {
            for cut in [&base[0][..len], &base[1][..len.min(base[1].len())]] {
                m.push(cut, &mut |_, _| n += 1);
            }
        }
        // Every header byte flipped in turn.
        for i in 0..66 {
            let mut f = base[0].clone();
            f[i] ^= 0x5a;
            m.push(&f, &mut |_, _| n += 1);
        }
        m.flush(&mut |_, _| n += 1);
        // Every frame went up once, alone or in a super-frame.
        let st = m.stats;
        assert_eq!(
            st.frames,
            st.packets - st.super_frames + st.merged,
            "{st:?}"
        );
        assert_eq!(n, st.packets);
        assert!(st.bad_csum > 0, "flipped bytes are caught: {st:?}");
    }
}
