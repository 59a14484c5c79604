//! The data patterns of the kernel's SourceSink function
//! (drivers/usb/gadget/function/f_sourcesink.c), so xferlab can feed and
//! check that gadget, and its own gadget can play the same role:
//!
//! * `0` zeros: every byte 0;
//! * `1` mod63: byte `i` of a request is `(i % wMaxPacketSize) % 63`, i.e.
//!   the count restarts with every packet (the gadget checks OUT data the
//!   same way and halts its OUT endpoint on the first bad byte, which the
//!   host sees as a stall);
//! * `2` none: no pattern is written or checked.
//!
//! Both sides agree as long as every transfer is a whole number of packets
//! (a short packet ends a transfer, and the next one starts at 0 again).

use std::fmt;
use std::str::FromStr;

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    Zeros,
    Mod63,
    #[default]
    None,
}

impl Pattern {
    /// SourceSink's `pattern` attribute value.
    pub fn sourcesink_number(self) -> u8 {
        match self {
            Pattern::Zeros => 0,
            Pattern::Mod63 => 1,
            Pattern::None => 2,
        }
    }

    /// Fills `buf` as one request of the pattern on an endpoint with
    /// `max_packet`-byte packets.
    pub fn fill(self, buf: &mut [u8], max_packet: usize) {
        match self {
            Pattern::Zeros => buf.fill(0),
            Pattern::Mod63 => {
                let mp = max_packet.max(1);
                // One packet's worth, then copies: cheaper than a modulo per byte.
                let first = mp.min(buf.len());
                for (i, b) in buf[..first].iter_mut().enumerate() {
                    *b = (i % 63) as u8;
                }
                let mut done = first;
                while done < buf.len() {
                    let n = first.min(buf.len() - done);
                    buf.copy_within(0..n, done);
                    done += n;
                }
            }
            Pattern::None => {}
        }
    }

    /// Checks one completed request's data; the first wrong byte, if any.
    pub fn check(self, buf: &[u8], max_packet: usize) -> Result<(), Mismatch> {
        match self {
            Pattern::None => Ok(()),
            Pattern::Zeros => match buf.iter().position(|&b| b != 0) {
                None => Ok(()),
                Some(i) => Err(Mismatch {
                    offset: i,
                    expected: 0,
                    got: buf[i],
                }),
            },
            Pattern::Mod63 => {
                let mp = max_packet.max(1);
                for (p, packet) in buf.chunks(mp).enumerate() {
                    for (i, &b) in packet.iter().enumerate() {
                        let want = (i % 63) as u8;
                        if b != want {
                            return Err(Mismatch {
                                offset: p * mp + i,
                                expected: want,
                                got: b,
                            });
                        }
                    }
                }
                Ok(())
            }
        }
    }
}

/// A `--pattern` that is none of SourceSink's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown pattern `{0}`: use 0/zeros, 1/mod63 or 2/none (SourceSink's numbers)")]
pub struct UnknownPattern(pub String);

impl FromStr for Pattern {
    type Err = UnknownPattern;
    fn from_str(s: &str) -> Result<Self, UnknownPattern> {
        match s {
            "0" | "zeros" => Ok(Pattern::Zeros),
            "1" | "mod63" => Ok(Pattern::Mod63),
            "2" | "none" => Ok(Pattern::None),
            _ => Err(UnknownPattern(s.to_owned())),
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Pattern::Zeros => "zeros",
            Pattern::Mod63 => "mod63",
            Pattern::None => "none",
        })
    }
}

/// A pattern checker for one packet size: one reference packet built up
/// front, then a memcmp per packet (the per-byte check only runs to name the
/// first bad byte). No allocation per transfer.
#[derive(Debug, Clone)]
pub struct Checker {
    pattern: Pattern,
    max_packet: usize,
    packet: Vec<u8>,
}

impl Checker {
    pub fn new(pattern: Pattern, max_packet: usize) -> Self {
        let max_packet = max_packet.max(1);
        let mut packet = vec![0u8; max_packet];
        pattern.fill(&mut packet, max_packet);
        Checker {
            pattern,
            max_packet,
            packet,
        }
    }

    pub fn check(&self, buf: &[u8]) -> Result<(), Mismatch> {
        if self.pattern == Pattern::None {
            return Ok(());
        }
        for (p, chunk) in buf.chunks(self.max_packet).enumerate() {
            if chunk != &self.packet[..chunk.len()] {
                let m = self
                    .pattern
                    .check(chunk, self.max_packet)
                    .expect_err("chunks differ");
                return Err(Mismatch {
                    offset: p * self.max_packet + m.offset,
                    ..m
                });
            }
        }
        Ok(())
    }
}

/// The first byte that broke the pattern in one transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    pub offset: usize,
    pub expected: u8,
    pub got: u8,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "byte {} is {} where the pattern has {}",
            self.offset, self.got, self.expected
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// f_sourcesink.c's reinit_write_data, transcribed literally.
    fn kernel_fill(len: usize, max_packet: usize) -> Vec<u8> {
        (0..len).map(|i| ((i % max_packet) % 63) as u8).collect()
    }

    #[test]
    fn mod63_matches_the_kernel_for_every_packet_size() {
        for mp in [8, 64, 512, 1024] {
            for len in [0, 1, 62, 63, 64, 511, 512, 4096, 65536, 1000] {
                let mut buf = vec![0xaa; len];
                Pattern::Mod63.fill(&mut buf, mp);
                assert_eq!(buf, kernel_fill(len, mp), "mp {mp} len {len}");
                assert!(Pattern::Mod63.check(&buf, mp).is_ok());
            }
        }
    }

    #[test]
    fn mismatches_name_the_first_bad_byte() {
        let mut buf = kernel_fill(4096, 512);
        buf[1000] ^= 1;
        let m = Pattern::Mod63.check(&buf, 512).unwrap_err();
        assert_eq!(
            m,
            Mismatch {
                offset: 1000,
                expected: ((1000 % 512) % 63) as u8,
                got: buf[1000]
            }
        );
        // Data of the wrong packet size does not pass either.
        assert!(Pattern::Mod63.check(&kernel_fill(1024, 1024), 512).is_err());
        let mut z = vec![0u8; 100];
        assert!(Pattern::Zeros.check(&z, 512).is_ok());
        z[99] = 7;
        assert_eq!(Pattern::Zeros.check(&z, 512).unwrap_err().offset, 99);
        assert!(Pattern::None.check(&z, 512).is_ok());
    }

    #[test]
    fn a_short_last_packet_still_checks() {
        let buf = kernel_fill(512 + 100, 512);
        assert!(Pattern::Mod63.check(&buf, 512).is_ok());
    }

    #[test]
    fn the_checker_agrees_with_the_byte_by_byte_check() {
        for pattern in [Pattern::Zeros, Pattern::Mod63, Pattern::None] {
            let c = Checker::new(pattern, 512);
            let mut buf = vec![0u8; 4096 + 100];
            pattern.fill(&mut buf, 512);
            assert!(c.check(&buf).is_ok());
            for bad in [0, 511, 512, 3000, 4195] {
                let mut b = buf.clone();
                b[bad] ^= 0x40;
                assert_eq!(
                    c.check(&b).err(),
                    pattern.check(&b, 512).err(),
                    "{pattern} at {bad}"
                );
                if pattern != Pattern::None {
                    assert_eq!(c.check(&b).unwrap_err().offset, bad);
                }
            }
        }
    }

    #[test]
    fn parses_numbers_and_names() {
        assert_eq!("1".parse::<Pattern>().unwrap(), Pattern::Mod63);
        assert_eq!("zeros".parse::<Pattern>().unwrap(), Pattern::Zeros);
        assert!("3"
            .parse::<Pattern>()
            .unwrap_err()
            .to_string()
            .contains("0/zeros"));
        assert_eq!(Pattern::Mod63.sourcesink_number(), 1);
    }
}
