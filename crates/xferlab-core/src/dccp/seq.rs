//! 48-bit circular sequence numbers (RFC 4340 sec. 7.1 and the short-number
//! extension of sec. 7.6).

/// The low 48 bits.
pub const SEQ_MASK: u64 = (1 << 48) - 1;
const HALF: u64 = 1 << 47;

/// A 48-bit DCCP sequence or acknowledgement number; arithmetic wraps.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, PartialOrd, Ord)]
pub struct Seq(u64);

impl Seq {
    pub const fn new(v: u64) -> Self {
        Seq(v & SEQ_MASK)
    }
    pub const fn get(self) -> u64 {
        self.0
    }
    #[allow(clippy::should_implement_trait)]
    pub const fn add(self, n: u64) -> Seq {
        Seq(self.0.wrapping_add(n) & SEQ_MASK)
    }
    #[allow(clippy::should_implement_trait)]
    pub const fn sub(self, n: u64) -> Seq {
        Seq(self.0.wrapping_sub(n) & SEQ_MASK)
    }
    /// `self - other` as a signed circular distance in [-2^47, 2^47).
    pub const fn dist(self, other: Seq) -> i64 {
        let d = self.0.wrapping_sub(other.0) & SEQ_MASK;
        if d >= HALF {
            d as i64 - (1i64 << 48)
        } else {
            d as i64
        }
    }
    /// Circular "less than" (sec. 7.1: a < b when (b - a) mod 2^48 < 2^47).
    pub const fn before(self, other: Seq) -> bool {
        self.dist(other) < 0
    }
    pub const fn after(self, other: Seq) -> bool {
        self.dist(other) > 0
    }
    /// The later of two numbers, circularly.
    pub const fn max(self, other: Seq) -> Seq {
        if self.before(other) {
            other
        } else {
            self
        }
    }
    /// `lo <= self <= hi`, circularly.
    pub const fn within(self, lo: Seq, hi: Seq) -> bool {
        self.dist(lo) >= 0 && hi.dist(self) >= 0
    }
    /// Extends a 24-bit number from a short (X=0) header to the 48-bit
    /// number closest to `reference` (GSR for sequence numbers, GSS for
    /// acknowledgements), as sec. 7.6 prescribes.
    pub const fn extend_short(reference: Seq, short: u32) -> Seq {
        let low = (reference.0 & 0xFF_FFFF) as i64;
        let mut d = (short as i64 & 0xFF_FFFF) - low;
        if d >= 1 << 23 {
            d -= 1 << 24;
        } else if d < -(1 << 23) {
            d += 1 << 24;
        }
        Seq::new((reference.0 as i64 + d) as u64)
    }
}

impl std::fmt::Display for Seq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_and_compares_circularly() {
        let top = Seq::new(SEQ_MASK);
        assert_eq!(top.add(1), Seq::new(0));
        assert_eq!(Seq::new(0).sub(1), top);
        assert!(top.before(Seq::new(5)));
        assert_eq!(Seq::new(5).dist(top), 6);
        assert_eq!(top.dist(Seq::new(5)), -6);
        assert!(Seq::new(3).within(top, Seq::new(3)));
        assert!(!Seq::new(4).within(top, Seq::new(3)));
        assert_eq!(top.max(Seq::new(1)), Seq::new(1));
        assert_eq!(Seq::new(1 << 50 | 7), Seq::new(7));
    }

    #[test]
    fn short_numbers_extend_near_the_reference() {
        let r = Seq::new(0x12_34FF_FFF0);
        assert_eq!(Seq::extend_short(r, 0x00_0005), Seq::new(0x12_3500_0005));
        assert_eq!(Seq::extend_short(r, 0xFF_FF00), Seq::new(0x12_34FF_FF00));
        let r = Seq::new(0x12_3500_0002);
        assert_eq!(Seq::extend_short(r, 0xFF_FFFE), Seq::new(0x12_34FF_FFFE));
        assert_eq!(
            Seq::extend_short(Seq::new(3), 0xFF_FFFF),
            Seq::new(SEQ_MASK)
        );
    }
}
