//! The DCCP checksum (RFC 4340 sec. 9): the Internet checksum over an
//! IPv4/IPv6 pseudo-header, the DCCP header and options, and the part of
//! the payload that Checksum Coverage (CsCov) names.

use crate::csum;

/// IP protocol number of DCCP, used in the pseudo-header.
pub const IPPROTO_DCCP: u8 = 33;

/// What the checksum covers besides the DCCP packet itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pseudo {
    /// DCCP-UDP (RFC 6773): the UDP carrier protects the addresses and a
    /// NAT rewrites them without knowing DCCP, so the DCCP checksum here
    /// covers the DCCP header and payload only (no IP pseudo-header).
    None,
    /// Raw IPv4, protocol 33 (sec. 9.1).
    V4 { src: [u8; 4], dst: [u8; 4] },
    /// Raw IPv6, next header 33 (sec. 9.1, RFC 2460 sec. 8.1).
    V6 { src: [u8; 16], dst: [u8; 16] },
}

impl Pseudo {
    /// The same pseudo-header seen from the other end (source and
    /// destination swapped), for checking received packets.
    pub fn reversed(self) -> Self {
        match self {
            Pseudo::None => Pseudo::None,
            Pseudo::V4 { src, dst } => Pseudo::V4 { src: dst, dst: src },
            Pseudo::V6 { src, dst } => Pseudo::V6 { src: dst, dst: src },
        }
    }
}

/// How many bytes of a `total`-byte packet whose header and options take
/// `data_offset` bytes the checksum covers, or `None` when CsCov reaches
/// past the end of the packet (such packets are dropped, sec. 9.2).
pub fn covered_len(cscov: u8, data_offset: usize, total: usize) -> Option<usize> {
    if cscov == 0 {
        return Some(total);
    }
    let n = data_offset + (usize::from(cscov) - 1) * 4;
    (n <= total).then_some(n)
}

/// The checksum of `packet` (a whole DCCP packet; its checksum field, bytes
/// 6..8, is skipped) over its first `covered` bytes.
pub fn compute(pseudo: &Pseudo, packet: &[u8], covered: usize) -> u16 {
    let len = packet.len() as u64;
    let mut acc = match pseudo {
        Pseudo::None => 0,
        Pseudo::V4 { src, dst } => {
            csum::sum(csum::sum(0, src), dst) + u64::from(IPPROTO_DCCP) + len
        }
        Pseudo::V6 { src, dst } => {
            csum::sum(csum::sum(0, src), dst)
                + (len >> 16)
                + (len & 0xFFFF)
                + u64::from(IPPROTO_DCCP)
        }
    };
    acc = csum::sum(acc, &packet[..6.min(covered)]);
    acc = csum::sum(acc, packet.get(8..covered).unwrap_or_default());
    !csum::fold(acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coverage_follows_cscov() {
        assert_eq!(covered_len(0, 16, 100), Some(100));
        assert_eq!(covered_len(1, 16, 100), Some(16));
        assert_eq!(covered_len(3, 16, 100), Some(24));
        assert_eq!(covered_len(15, 16, 72), Some(72));
        assert_eq!(covered_len(15, 16, 71), None);
    }

    #[test]
    fn a_stored_checksum_sums_to_all_ones() {
        let mut p = [0u8; 21];
        for (i, b) in p.iter_mut().enumerate() {
            *b = (i * 37 + 11) as u8;
        }
        let ps = Pseudo::V4 {
            src: [10, 0, 0, 1],
            dst: [10, 0, 0, 2],
        };
        let c = compute(&ps, &p, p.len());
        p[6..8].copy_from_slice(&c.to_be_bytes());
        // Verifying the classic way: the sum including the field is 0xFFFF.
        let acc = csum::sum(csum::sum(0, &[10, 0, 0, 1, 10, 0, 0, 2]), &p) + 33 + 21;
        assert_eq!(csum::fold(acc), 0xFFFF);
        let v6 = Pseudo::V6 {
            src: [1; 16],
            dst: [2; 16],
        };
        assert_ne!(compute(&v6, &p, 21), compute(&Pseudo::None, &p, 21));
    }
}
