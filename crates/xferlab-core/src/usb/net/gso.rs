//! Frames out of a TAP with offloads (IFF_VNET_HDR, TSO and checksum
//! offload): each read() is a `virtio_net_hdr` and a packet that may be a
//! TCP super-frame of up to 64 KB (GSO) or carry a checksum left for the
//! device to finish (NEEDS_CSUM). [`Segmenter`] cuts a super-frame into
//! Ethernet frames of the header's segment size, each with its own IP
//! length, IPv4 id and checksum, TCP sequence number, flags and checksum,
//! as the kernel's software GSO would; a plain packet is one frame, its
//! pending checksum completed. A malformed packet yields no frame.
//!
//! Letting the TAP hand over super-frames saves the kernel's own software
//! segmentation (an skb, a copy and a checksum per frame) and one read() per
//! frame (docs/usb-net.md).

/// `struct virtio_net_hdr` (without `num_buffers`): what precedes each
/// packet on a TAP opened with IFF_VNET_HDR.
pub const VNET_HDR_LEN: usize = 10;
/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`.
pub(crate) const F_NEEDS_CSUM: u8 = 1;
pub(crate) const GSO_NONE: u8 = 0;
pub(crate) const GSO_TCPV4: u8 = 1;
pub(crate) const GSO_TCPV6: u8 = 4;
const GSO_ECN: u8 = 0x80;

const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

/// The ones' complement sum of `data` (RFC 1071), folded to 16 bits, with
/// `init` added; big-endian words, an odd last byte padded with zero.
pub fn csum_add(init: u32, data: &[u8]) -> u16 {
    crate::csum::fold(crate::csum::sum(u64::from(init), data))
}

/// One packet read from the TAP, as the segmenter sees it.
#[derive(Debug, Clone, Copy)]
struct Plan {
    gso: u8,
    /// Offset of the IP header in the packet.
    ip: usize,
    /// Offset of the TCP header (GSO) or where checksumming starts.
    l4: usize,
    /// End of the headers (GSO: IP + TCP with options).
    hdr_end: usize,
    /// Payload bytes per segment.
    mss: usize,
    csum_at: Option<usize>,
}

/// Cuts one packet read from the TAP into frames, one [`Segmenter::next`]
/// at a time (so the driver takes them as it has room).
#[derive(Debug, Default)]
pub struct Segmenter {
    plan: Option<Plan>,
    /// Payload offset of the next segment (GSO), or 0/1 for a plain
    /// packet not yet / already handed out.
    off: usize,
    seg: u32,
    /// Packets dropped as malformed.
    pub malformed: u64,
}

impl Segmenter {
    /// Starts on `pkt` (virtio_net_hdr + Ethernet frame). False (and
    /// counted) when it cannot be cut; the previous packet is abandoned.
    pub fn start(&mut self, pkt: &[u8]) -> bool {
        self.plan = Self::plan(pkt);
        self.off = 0;
        self.seg = 0;
        if self.plan.is_none() {
            self.malformed += 1;
        }
        self.plan.is_some()
    }

    fn plan(pkt: &[u8]) -> Option<Plan> {
        let h = pkt.get(..VNET_HDR_LEN)?;
        let flags = h[0];
        let gso = h[1] & !GSO_ECN;
        let gso_size = usize::from(u16::from_le_bytes([h[4], h[5]]));
        let csum_start = usize::from(u16::from_le_bytes([h[6], h[7]]));
        let csum_offset = usize::from(u16::from_le_bytes([h[8], h[9]]));
        let f = &pkt[VNET_HDR_LEN..];
        let csum_at = if flags & F_NEEDS_CSUM != 0 {
            let at = csum_start.checked_add(csum_offset)?;
            if at + 2 > f.len() {
                return None;
            }
            Some(at)
        } else {
            None
        };
        if gso == GSO_NONE {
            return Some(Plan {
                gso,
                ip: 0,
                l4: csum_start,
                hdr_end: f.len(),
                mss: 0,
                csum_at,
            });
        }
        if gso != GSO_TCPV4 && gso != GSO_TCPV6 || gso_size == 0 {
            return None;
        }
        // Ethernet, with at most one VLAN tag.
        let mut ip = 14;
        let mut ethertype = u16::from_be_bytes([*f.get(12)?, *f.get(13)?]);
        if ethertype == 0x8100 {
            ethertype = u16::from_be_bytes([*f.get(16)?, *f.get(17)?]);
            ip = 18;
        }
        let l4 = match (gso, ethertype) {
            (GSO_TCPV4, 0x0800) => {
                let ihl = usize::from(f.get(ip)? & 0x0f) * 4;
                if ihl < 20 || f[ip] >> 4 != 4 || *f.get(ip + 9)? != 6 {
                    return None;
                }
                ip + ihl
            }
            // No extension headers between IPv6 and TCP (the kernel's
            // TCP sends none).
            (GSO_TCPV6, 0x86dd) if *f.get(ip + 6)? == 6 => ip + 40,
            _ => return None,
        };
        let thl = usize::from(f.get(l4 + 12)? >> 4) * 4;
        let hdr_end = l4 + thl;
        if thl < 20 || hdr_end > f.len() {
            return None;
        }
        Some(Plan {
            gso,
            ip,
            l4,
            hdr_end,
            mss: gso_size,
            csum_at,
        })
    }

    /// Writes the next frame into `out` (at least the headers plus one
    /// segment, or the whole plain packet, long) and returns its length;
    /// `None` when the packet is done.
    pub fn next(&mut self, pkt: &[u8], out: &mut [u8]) -> Option<usize> {
        let p = self.plan?;
        let f = &pkt[VNET_HDR_LEN..];
        if p.gso == GSO_NONE {
            if self.off > 0 || out.len() < f.len() {
                self.plan = None;
                return None;
            }
            self.off = 1;
            let o = &mut out[..f.len()];
            o.copy_from_slice(f);
            if let Some(at) = p.csum_at {
                // The field holds the pseudo-header sum already.
                let c = !csum_add(0, &o[p.l4..]);
                o[at..at + 2].copy_from_slice(&c.to_be_bytes());
            }
            return Some(f.len());
        }
        let payload = &f[p.hdr_end..];
        if self.off >= payload.len() && !(payload.is_empty() && self.seg == 0) {
            self.plan = None;
            return None;
        }
        let len = p.mss.min(payload.len() - self.off);
        let n = p.hdr_end + len;
        if out.len() < n {
            self.plan = None;
            return None;
        }
        let last = self.off + len >= payload.len();
        let o = &mut out[..n];
        o[..p.hdr_end].copy_from_slice(&f[..p.hdr_end]);
        o[p.hdr_end..].copy_from_slice(&payload[self.off..self.off + len]);
        let tcp_len = n - p.l4;
        // IP: length, and for IPv4 the id and header checksum.
        if p.gso == GSO_TCPV4 {
            let tot = (n - p.ip) as u16;
            o[p.ip + 2..p.ip + 4].copy_from_slice(&tot.to_be_bytes());
            let id = u16::from_be_bytes([o[p.ip + 4], o[p.ip + 5]]).wrapping_add(self.seg as u16);
            o[p.ip + 4..p.ip + 6].copy_from_slice(&id.to_be_bytes());
            o[p.ip + 10..p.ip + 12].fill(0);
            let c = !csum_add(0, &o[p.ip..p.l4]);
            o[p.ip + 10..p.ip + 12].copy_from_slice(&c.to_be_bytes());
        } else {
            let pl = (n - p.ip - 40) as u16;
            o[p.ip + 4..p.ip + 6].copy_from_slice(&pl.to_be_bytes());
        }
        // TCP: sequence number, flags, checksum over a fresh pseudo-header.
        let t = p.l4;
        let seq = u32::from_be_bytes([o[t + 4], o[t + 5], o[t + 6], o[t + 7]])
            .wrapping_add(self.off as u32);
        o[t + 4..t + 8].copy_from_slice(&seq.to_be_bytes());
        if !last {
            o[t + 13] &= !(TCP_FIN | TCP_PSH);
        }
        if self.seg > 0 {
            o[t + 13] &= !TCP_CWR;
        }
        o[t + 16..t + 18].fill(0);
        let addrs = if p.gso == GSO_TCPV4 {
            &o[p.ip + 12..p.ip + 20]
        } else {
            &o[p.ip + 8..p.ip + 40]
        };
        let pseudo = u32::from(csum_add(0, addrs)) + 6 + tcp_len as u32;
        let c = !csum_add(pseudo, &o[t..]);
        o[t + 16..t + 18].copy_from_slice(&c.to_be_bytes());
        self.off += len.max(1);
        self.seg += 1;
        if last {
            self.plan = None;
        }
        Some(n)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn vnet(
        flags: u8,
        gso: u8,
        gso_size: u16,
        csum_start: u16,
        csum_offset: u16,
    ) -> Vec<u8> {
        let mut h = vec![flags, gso];
        h.extend_from_slice(&0u16.to_le_bytes());
        h.extend_from_slice(&gso_size.to_le_bytes());
        h.extend_from_slice(&csum_start.to_le_bytes());
        h.extend_from_slice(&csum_offset.to_le_bytes());
        h
    }

    /// An Ethernet + IPv4 + TCP (12 bytes of options) packet.
    pub(crate) fn tcp4(payload: &[u8], flags: u8) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
        let tot = (20 + 32 + payload.len()) as u16;
        f.extend_from_slice(&[0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, 6, 0, 0]);
        f[16..18].copy_from_slice(&tot.to_be_bytes());
        f.extend_from_slice(&[169, 254, 10, 2, 169, 254, 10, 1]);
        f.extend_from_slice(&[0x30, 0x39, 0x14, 0x51]); // ports
        f.extend_from_slice(&1000u32.to_be_bytes()); // seq
        f.extend_from_slice(&7u32.to_be_bytes()); // ack
        f.extend_from_slice(&[0x80, 0x10 | flags, 0x01, 0xf5, 0, 0, 0, 0]);
        f.extend_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
        f.extend_from_slice(payload);
        f
    }

    /// The ones' complement sum of a header or segment with its checksum
    /// in place is 0xffff.
    fn tcp4_ok(f: &[u8]) -> bool {
        let ip = 14;
        let l4 = 34;
        let pseudo = u32::from(csum_add(0, &f[ip + 12..ip + 20])) + 6 + (f.len() - l4) as u32;
        csum_add(0, &f[ip..l4]) == 0xffff && csum_add(pseudo, &f[l4..]) == 0xffff
    }

    #[test]
    fn checksum_is_rfc1071() {
        // RFC 1071's example: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        assert_eq!(
            csum_add(0, &[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0xddf2
        );
        assert_eq!(csum_add(0, &[0xff]), 0xff00);
    }

    #[test]
    fn a_tcpv4_super_frame_becomes_mss_frames_with_their_own_headers() {
        let payload: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        let mut pkt = vnet(F_NEEDS_CSUM, GSO_TCPV4, 1448, 34, 16);
        pkt.extend_from_slice(&tcp4(&payload, TCP_PSH | TCP_FIN | TCP_CWR));
        let mut s = Segmenter::default();
        assert!(s.start(&pkt));
        let mut out = vec![0u8; 2048];
        let mut got = Vec::new();
        while let Some(n) = s.next(&pkt, &mut out) {
            got.push(out[..n].to_vec());
        }
        assert_eq!(got.len(), 3);
        let mut data = Vec::new();
        for (i, f) in got.iter().enumerate() {
            assert!(tcp4_ok(f), "segment {i}: checksums");
            let tot = u16::from_be_bytes([f[16], f[17]]) as usize;
            assert_eq!(tot, f.len() - 14);
            assert_eq!(u16::from_be_bytes([f[18], f[19]]), 0x1234 + i as u16);
            let seq = u32::from_be_bytes([f[38], f[39], f[40], f[41]]);
            assert_eq!(seq, 1000 + 1448 * i as u32);
            let fl = f[47];
            assert_eq!(fl & TCP_CWR != 0, i == 0);
            assert_eq!(fl & (TCP_PSH | TCP_FIN) != 0, i == 2);
            data.extend_from_slice(&f[66..]);
        }
        assert_eq!(got[0].len(), 66 + 1448);
        assert_eq!(got[2].len(), 66 + 3000 - 2 * 1448);
        assert_eq!(data, payload);
        assert_eq!(s.next(&pkt, &mut out), None);
    }

    #[test]
    fn a_tcpv6_super_frame_gets_payload_lengths_and_checksums() {
        let payload = vec![0x5a; 2500];
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xdd];
        f.extend_from_slice(&[0x60, 0, 0, 0, 0, 0, 6, 64]);
        f.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        f.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        f.extend_from_slice(&[
            0x30, 0x39, 0x14, 0x51, 0, 0, 0, 5, 0, 0, 0, 7, 0x50, 0x10, 1, 0, 0, 0, 0, 0,
        ]);
        f.extend_from_slice(&payload);
        let mut pkt = vnet(F_NEEDS_CSUM, GSO_TCPV6, 1200, 54, 16);
        pkt.extend_from_slice(&f);
        let mut s = Segmenter::default();
        assert!(s.start(&pkt));
        let mut out = vec![0u8; 2048];
        let mut n_seg = 0;
        while let Some(n) = s.next(&pkt, &mut out) {
            let o = &out[..n];
            assert_eq!(u16::from_be_bytes([o[18], o[19]]) as usize, n - 54);
            let pseudo = u32::from(csum_add(0, &o[22..54])) + 6 + (n - 54) as u32;
            assert_eq!(csum_add(pseudo, &o[54..]), 0xffff);
            n_seg += 1;
        }
        assert_eq!(n_seg, 3);
    }

    #[test]
    fn a_plain_packet_gets_its_pending_checksum_completed() {
        let mut f = tcp4(b"hello", TCP_PSH);
        // The kernel leaves the pseudo-header sum in the field.
        let pseudo = u32::from(csum_add(0, &f[26..34])) + 6 + (f.len() - 34) as u32;
        let folded = csum_add(pseudo, &[]);
        f[50..52].copy_from_slice(&folded.to_be_bytes());
        // And the IPv4 header checksum is the kernel's own.
        let c = !csum_add(0, &f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        let mut pkt = vnet(F_NEEDS_CSUM, GSO_NONE, 0, 34, 16);
        pkt.extend_from_slice(&f);
        let mut s = Segmenter::default();
        assert!(s.start(&pkt));
        let mut out = vec![0u8; 2048];
        let n = s.next(&pkt, &mut out).unwrap();
        assert_eq!(n, f.len());
        assert!(tcp4_ok(&out[..n]));
        assert_eq!(s.next(&pkt, &mut out), None);
    }

    #[test]
    fn malformed_packets_yield_nothing_and_never_panic() {
        let mut s = Segmenter::default();
        let mut out = vec![0u8; 2048];
        let good = {
            let mut p = vnet(F_NEEDS_CSUM, GSO_TCPV4, 1448, 34, 16);
            p.extend_from_slice(&tcp4(&[1; 3000], 0));
            p
        };
        for cut in 0..good.len().min(200) {
            if s.start(&good[..cut]) {
                while s.next(&good[..cut], &mut out).is_some() {}
            }
        }
        let mut bad = good.clone();
        bad[1] = 3; // UDP fragmentation offload: never enabled
        assert!(!s.start(&bad));
        let mut bad = good.clone();
        bad[4] = 0;
        bad[5] = 0; // segment size 0
        assert!(!s.start(&bad));
        let mut bad = good.clone();
        bad[8] = 0xff; // checksum field past the end
        bad[9] = 0xff;
        assert!(!s.start(&bad));
        assert!(s.malformed >= 3);
        assert_eq!(s.next(&bad, &mut out), None);
    }
}
