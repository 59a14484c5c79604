//! What the emulator needs to know about one packet read from a TUN device
//! with IFF_VNET_HDR: its size on the wire (per segment, for GSO
//! superpackets), whether it is ECN-capable, and how to mark it CE.
//!
//! The buffer starts with the 10-byte virtio-net header, then the IP packet.

/// Length of `struct virtio_net_hdr` (TUN's default vnet header size).
pub const VNET_HDR_LEN: usize = 10;

const GSO_NONE: u8 = 0;
const GSO_ECN: u8 = 0x80;

/// The ECN field of an IP header.
pub const ECN_NOT_ECT: u8 = 0;
pub const ECN_CE: u8 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PacketInfo {
    /// Bytes of the IP packet (superpacket) without the vnet header.
    pub ip_len: u32,
    /// Segments it becomes on the wire (1 unless GSO).
    pub segments: u32,
    /// Bytes of all those segments together (headers repeated per segment).
    pub wire_bytes: u64,
    /// ECN field (0 = Not-ECT, 1/2 = ECT, 3 = CE); 0 for non-IP.
    pub ecn: u8,
    /// A hash of the 5-tuple (addresses, protocol, ports), for flow
    /// queueing; 0 for non-IP packets.
    pub flow: u32,
}

impl PacketInfo {
    pub fn is_ect(&self) -> bool {
        self.ecn == 1 || self.ecn == 2
    }

    /// A plain packet of `len` IP bytes (for tests and non-GSO paths).
    pub fn simple(len: u32, ecn: u8) -> Self {
        PacketInfo {
            ip_len: len,
            segments: 1,
            wire_bytes: u64::from(len),
            ecn,
            flow: 0,
        }
    }
}

/// Reads the vnet header and IP header of `buf` (vnet header + IP packet).
/// Unparseable packets count as one segment of their length.
pub fn inspect(buf: &[u8]) -> PacketInfo {
    let ip = buf.get(VNET_HDR_LEN..).unwrap_or(&[]);
    let ip_len = ip.len() as u32;
    let mut info = PacketInfo::simple(ip_len, ECN_NOT_ECT);
    let Some(&first) = ip.first() else {
        return info;
    };
    let (l3_len, l4_proto, ecn) = match first >> 4 {
        4 if ip.len() >= 20 => (usize::from(first & 0x0f) * 4, ip[9], ip[1] & 3),
        6 if ip.len() >= 40 => (40, ip[6], (ip[1] >> 4) & 3),
        _ => return info,
    };
    info.ecn = ecn;
    info.flow = flow_key(ip, l3_len, l4_proto);
    let gso_type = buf[1] & !GSO_ECN;
    let gso_size = u16::from_ne_bytes([buf[4], buf[5]]) as usize;
    if gso_type == GSO_NONE || gso_size == 0 {
        return info;
    }
    // Header bytes repeated in every segment: IP + TCP (with options) or
    // IP + UDP. The vnet header's hdr_len is only a hint (the kernel may
    // put skb_headlen there), so the headers are parsed instead.
    let l4_len = match l4_proto {
        6 => ip
            .get(l3_len + 12)
            .map(|&off| usize::from(off >> 4) * 4)
            .unwrap_or(20),
        17 => 8,
        _ => 0,
    };
    let hdr = l3_len + l4_len;
    let payload = ip.len().saturating_sub(hdr);
    let segments = payload.div_ceil(gso_size).max(1);
    info.segments = segments as u32;
    info.wire_bytes = (payload + segments * hdr) as u64;
    info
}

/// FNV-1a over the 5-tuple: source and destination address, protocol,
/// and for TCP, UDP and DCCP (whose headers all start with the two
/// ports) the ports. A few dozen byte operations per packet, no branch
/// on the data; the queue mixes in its own perturbation.
fn flow_key(ip: &[u8], l3_len: usize, proto: u8) -> u32 {
    let addrs = match ip[0] >> 4 {
        4 => &ip[12..20],
        _ => &ip[8..40],
    };
    let ports = match proto {
        6 | 17 | 33 => ip.get(l3_len..l3_len + 4).unwrap_or(&[]),
        _ => &[],
    };
    let mut h: u32 = 0x811c_9dc5;
    for &b in addrs.iter().chain(std::iter::once(&proto)).chain(ports) {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    h
}

/// Why a packet was or was not marked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkOutcome {
    Marked,
    /// Not ECN-capable (Not-ECT): RFC 3168 routers must not mark those.
    NotEct,
    /// Already CE: nothing to change.
    AlreadyCe,
    NotIp,
}

/// Sets CE on the IP packet in `buf` (vnet header + IP). IPv4: both ECN
/// bits of the TOS byte, header checksum updated incrementally (RFC 1624;
/// transport checksums exclude TOS); IPv6: the traffic class ECN bits.
pub fn mark_ce(buf: &mut [u8]) -> MarkOutcome {
    let Some(ip) = buf.get_mut(VNET_HDR_LEN..) else {
        return MarkOutcome::NotIp;
    };
    match ip.first().map(|b| b >> 4) {
        Some(4) if ip.len() >= 20 => {
            let ecn = ip[1] & 3;
            if ecn == ECN_NOT_ECT {
                return MarkOutcome::NotEct;
            }
            if ecn == ECN_CE {
                return MarkOutcome::AlreadyCe;
            }
            let old_word = u16::from_be_bytes([ip[0], ip[1]]);
            ip[1] |= ECN_CE;
            let new_word = u16::from_be_bytes([ip[0], ip[1]]);
            let hc = u16::from_be_bytes([ip[10], ip[11]]);
            // RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m')
            let mut sum = u32::from(!hc) + u32::from(!old_word) + u32::from(new_word);
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            let new_hc = !(sum as u16);
            ip[10..12].copy_from_slice(&new_hc.to_be_bytes());
            MarkOutcome::Marked
        }
        Some(6) if ip.len() >= 40 => {
            let ecn = (ip[1] >> 4) & 3;
            if ecn == ECN_NOT_ECT {
                return MarkOutcome::NotEct;
            }
            if ecn == ECN_CE {
                return MarkOutcome::AlreadyCe;
            }
            ip[1] |= ECN_CE << 4;
            MarkOutcome::Marked
        }
        _ => MarkOutcome::NotIp,
    }
}

/// The RFC 791 header checksum of an IPv4 header (0 when it is valid,
/// computed over a header that contains its checksum).
pub fn ipv4_header_sum(hdr: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for w in hdr.chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// vnet header + IPv4 + TCP (32-byte header) + payload.
    fn ipv4_tcp(tos: u8, payload: usize, gso_size: u16) -> Vec<u8> {
        let mut b = vec![0u8; VNET_HDR_LEN + 20 + 32 + payload];
        if gso_size > 0 {
            b[1] = 1; // VIRTIO_NET_HDR_GSO_TCPV4
            b[4..6].copy_from_slice(&gso_size.to_ne_bytes());
        }
        let total = (20 + 32 + payload) as u16;
        let ip = &mut b[VNET_HDR_LEN..];
        ip[0] = 0x45;
        ip[1] = tos;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[4..6].copy_from_slice(&0x1c46u16.to_be_bytes());
        ip[6] = 0x40;
        ip[8] = 64;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
        let c = ipv4_header_sum(&ip[..20]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        ip[20 + 12] = 8 << 4; // data offset 32 bytes
        b
    }

    #[test]
    fn superpacket_counts_wire_segments() {
        let b = ipv4_tcp(0, 10 * 1448 + 100, 1448);
        let i = inspect(&b);
        assert_eq!(i.segments, 11);
        assert_eq!(i.wire_bytes, (10 * 1448 + 100 + 11 * 52) as u64);
        let p = inspect(&ipv4_tcp(2, 1448, 0));
        assert_eq!((p.segments, p.wire_bytes, p.ecn), (1, 1500, 2));
        assert!(p.is_ect());
    }

    #[test]
    fn the_flow_key_follows_the_five_tuple() {
        let a = inspect(&ipv4_tcp(0, 100, 0));
        let mut b = ipv4_tcp(0, 100, 0);
        assert_eq!(inspect(&b).flow, a.flow, "same 5-tuple");
        b[VNET_HDR_LEN + 20 + 1] = 99; // source port low byte
        assert_ne!(inspect(&b).flow, a.flow, "another port");
        let mut c = ipv4_tcp(0, 100, 0);
        c[VNET_HDR_LEN + 19] = 3; // destination address
        assert_ne!(inspect(&c).flow, a.flow, "another host");
        assert_eq!(inspect(&[0u8; 12]).flow, 0, "not IP");
    }

    #[test]
    fn marking_keeps_ipv4_checksum_valid() {
        for tos in [0x01u8, 0x02, 0xb8 | 0x02, 0xfd, 0x21] {
            let mut b = ipv4_tcp(tos, 100, 0);
            assert_eq!(mark_ce(&mut b), MarkOutcome::Marked, "tos {tos:#x}");
            let ip = &b[VNET_HDR_LEN..];
            assert_eq!(ip[1], tos | 3);
            assert_eq!(
                ipv4_header_sum(&ip[..20]),
                0,
                "checksum invalid for tos {tos:#x}"
            );
            assert_eq!(mark_ce(&mut b), MarkOutcome::AlreadyCe);
        }
        let mut b = ipv4_tcp(0xb8, 100, 0);
        assert_eq!(mark_ce(&mut b), MarkOutcome::NotEct);
        assert_eq!(b[VNET_HDR_LEN + 1], 0xb8);
    }

    #[test]
    fn marking_ipv6_sets_traffic_class_bits() {
        let mut b = vec![0u8; VNET_HDR_LEN + 60];
        b[VNET_HDR_LEN] = 0x60 | 0x0b; // TC high nibble 0xb
        b[VNET_HDR_LEN + 1] = 0x80 | 0x20; // TC low nibble 0xa: ECN bits = ECT(0)
        assert_eq!(inspect(&b).ecn, 2);
        assert_eq!(mark_ce(&mut b), MarkOutcome::Marked);
        assert_eq!(b[VNET_HDR_LEN + 1] >> 4, 0xb);
        assert_eq!(b[VNET_HDR_LEN] & 0x0f, 0x0b);
        b[VNET_HDR_LEN + 1] = 0;
        assert_eq!(mark_ce(&mut b), MarkOutcome::NotEct);
    }
}
