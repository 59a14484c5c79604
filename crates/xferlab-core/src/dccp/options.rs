//! DCCP options (RFC 4340 sec. 5.8, 6, 7.7, 11.4, 11.7, 13; RFC 4342 sec.
//! 8.5): a borrowing, allocation-free parser over a packet's option bytes
//! and an encoder into a caller's buffer.

use super::DccpError;

pub const PADDING: u8 = 0;
pub const MANDATORY: u8 = 1;
pub const SLOW_RECEIVER: u8 = 2;
pub const CHANGE_L: u8 = 32;
pub const CONFIRM_L: u8 = 33;
pub const CHANGE_R: u8 = 34;
pub const CONFIRM_R: u8 = 35;
pub const INIT_COOKIE: u8 = 36;
pub const NDP_COUNT: u8 = 37;
pub const ACK_VECTOR_0: u8 = 38;
pub const ACK_VECTOR_1: u8 = 39;
pub const DATA_DROPPED: u8 = 40;
pub const TIMESTAMP: u8 = 41;
pub const TIMESTAMP_ECHO: u8 = 42;
pub const ELAPSED_TIME: u8 = 43;
pub const DATA_CHECKSUM: u8 = 44;
/// CCID3 receiver options (RFC 4342 sec. 8.5, 8.6).
pub const LOSS_EVENT_RATE: u8 = 192;
pub const LOSS_INTERVALS: u8 = 193;
pub const RECEIVE_RATE: u8 = 194;
/// SafeUDP's receiver report of its own socket-buffer drops, from the
/// general options' experimental and testing range 120..=126 (IANA DCCP
/// Option Types registry, RFC 4340 sec. 19.2). An experimental number:
/// never sent Mandatory, so a peer that does not know it ignores it
/// (sec. 5.8).
pub const HOST_DROPS: u8 = 120;

/// Which feature-negotiation option (sec. 6.1, 6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeatOp {
    ChangeL,
    ConfirmL,
    ChangeR,
    ConfirmR,
}

impl FeatOp {
    fn code(self) -> u8 {
        match self {
            FeatOp::ChangeL => CHANGE_L,
            FeatOp::ConfirmL => CONFIRM_L,
            FeatOp::ChangeR => CHANGE_R,
            FeatOp::ConfirmR => CONFIRM_R,
        }
    }
}

/// An Elapsed Time value, kept in the width it came in (sec. 13.2, 13.3):
/// units of 10 microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elapsed {
    None,
    Short(u16),
    Long(u32),
}

impl Elapsed {
    /// The narrowest encoding of `tens_of_us`.
    pub fn of(tens_of_us: u32) -> Self {
        match u16::try_from(tens_of_us) {
            Ok(v) => Elapsed::Short(v),
            Err(_) => Elapsed::Long(tens_of_us),
        }
    }
    pub fn value(self) -> Option<u32> {
        match self {
            Elapsed::None => None,
            Elapsed::Short(v) => Some(u32::from(v)),
            Elapsed::Long(v) => Some(v),
        }
    }
    fn len(self) -> usize {
        match self {
            Elapsed::None => 0,
            Elapsed::Short(_) => 2,
            Elapsed::Long(_) => 4,
        }
    }
    fn put(self, out: &mut [u8]) {
        match self {
            Elapsed::None => {}
            Elapsed::Short(v) => out.copy_from_slice(&v.to_be_bytes()),
            Elapsed::Long(v) => out.copy_from_slice(&v.to_be_bytes()),
        }
    }
}

/// One option, borrowing variable-length data from the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opt<'a> {
    Padding,
    Mandatory,
    SlowReceiver,
    /// A reserved single-byte option (3..=31), ignored on receipt.
    ReservedSingle(u8),
    /// Change/Confirm L/R: feature number and value bytes (a preference
    /// list for server-priority features, a big-endian number for
    /// non-negotiable ones; empty for an empty Confirm).
    Feature {
        op: FeatOp,
        feature: u8,
        value: &'a [u8],
    },
    InitCookie(&'a [u8]),
    /// Non-data packets since the last data packet (sec. 7.7), 1..6 bytes.
    NdpCount(u64),
    /// Ack Vector cells (sec. 11.4); `nonce` selects option 39 over 38.
    AckVector {
        nonce: bool,
        cells: &'a [u8],
    },
    DataDropped(&'a [u8]),
    Timestamp(u32),
    TimestampEcho {
        echo: u32,
        elapsed: Elapsed,
    },
    /// In units of 10 microseconds.
    ElapsedTime(Elapsed),
    DataChecksum(u32),
    /// CCID3 Loss Event Rate: 1/p rounded up; u32::MAX means no loss.
    LossEventRate(u32),
    /// CCID3 Receive Rate in bytes per second.
    ReceiveRate(u32),
    /// Datagrams the receiving host's socket dropped for lack of buffer
    /// space (SO_RXQ_OVFL), cumulative since the connection opened,
    /// modulo 2^32 (a cumulative count survives lost acknowledgements).
    HostDrops(u32),
    /// Any other option with a length byte (CCID-specific or reserved).
    Other {
        kind: u8,
        data: &'a [u8],
    },
}

fn be(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0, |a, &b| a << 8 | u64::from(b))
}

fn bad(kind: u8) -> DccpError {
    DccpError::BadOption(kind)
}

impl<'a> Opt<'a> {
    fn decode(kind: u8, data: &'a [u8]) -> Result<Opt<'a>, DccpError> {
        let n = data.len();
        Ok(match kind {
            CHANGE_L | CHANGE_R | CONFIRM_L | CONFIRM_R => {
                let op = match kind {
                    CHANGE_L => FeatOp::ChangeL,
                    CHANGE_R => FeatOp::ChangeR,
                    CONFIRM_L => FeatOp::ConfirmL,
                    _ => FeatOp::ConfirmR,
                };
                let (&feature, value) = data.split_first().ok_or(bad(kind))?;
                Opt::Feature { op, feature, value }
            }
            INIT_COOKIE => Opt::InitCookie(data),
            NDP_COUNT if (1..=6).contains(&n) => Opt::NdpCount(be(data)),
            ACK_VECTOR_0 | ACK_VECTOR_1 => Opt::AckVector {
                nonce: kind == ACK_VECTOR_1,
                cells: data,
            },
            DATA_DROPPED => Opt::DataDropped(data),
            TIMESTAMP if n == 4 => Opt::Timestamp(be(data) as u32),
            TIMESTAMP_ECHO if matches!(n, 4 | 6 | 8) => Opt::TimestampEcho {
                echo: be(&data[..4]) as u32,
                elapsed: match n {
                    4 => Elapsed::None,
                    6 => Elapsed::Short(be(&data[4..]) as u16),
                    _ => Elapsed::Long(be(&data[4..]) as u32),
                },
            },
            ELAPSED_TIME if n == 2 => Opt::ElapsedTime(Elapsed::Short(be(data) as u16)),
            ELAPSED_TIME if n == 4 => Opt::ElapsedTime(Elapsed::Long(be(data) as u32)),
            DATA_CHECKSUM if n == 4 => Opt::DataChecksum(be(data) as u32),
            LOSS_EVENT_RATE if n == 4 => Opt::LossEventRate(be(data) as u32),
            RECEIVE_RATE if n == 4 => Opt::ReceiveRate(be(data) as u32),
            HOST_DROPS if n == 4 => Opt::HostDrops(be(data) as u32),
            NDP_COUNT | TIMESTAMP | TIMESTAMP_ECHO | ELAPSED_TIME | DATA_CHECKSUM
            | LOSS_EVENT_RATE | RECEIVE_RATE | HOST_DROPS => return Err(bad(kind)),
            _ => Opt::Other { kind, data },
        })
    }

    /// Bytes this option takes on the wire.
    pub fn encoded_len(&self) -> usize {
        2 + match *self {
            Opt::Padding | Opt::Mandatory | Opt::SlowReceiver | Opt::ReservedSingle(_) => return 1,
            Opt::Feature { value, .. } => 1 + value.len(),
            Opt::InitCookie(d) | Opt::DataDropped(d) | Opt::Other { data: d, .. } => d.len(),
            Opt::AckVector { cells, .. } => cells.len(),
            Opt::NdpCount(v) => ndp_len(v),
            Opt::Timestamp(_)
            | Opt::DataChecksum(_)
            | Opt::LossEventRate(_)
            | Opt::ReceiveRate(_)
            | Opt::HostDrops(_) => 4,
            Opt::TimestampEcho { elapsed, .. } => 4 + elapsed.len(),
            Opt::ElapsedTime(e) => e.len(),
        }
    }

    /// Writes the option at the start of `out`; returns its length.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, DccpError> {
        let len = self.encoded_len();
        if len > 255 {
            return Err(DccpError::OptionTooLong);
        }
        if matches!(self, Opt::ElapsedTime(Elapsed::None)) {
            return Err(DccpError::OptionTooLong);
        }
        let out = out.get_mut(..len).ok_or(DccpError::BufferTooSmall)?;
        let kind = match *self {
            Opt::Padding => PADDING,
            Opt::Mandatory => MANDATORY,
            Opt::SlowReceiver => SLOW_RECEIVER,
            Opt::ReservedSingle(k) => k,
            Opt::Feature { op, .. } => op.code(),
            Opt::InitCookie(_) => INIT_COOKIE,
            Opt::NdpCount(_) => NDP_COUNT,
            Opt::AckVector { nonce, .. } => {
                if nonce {
                    ACK_VECTOR_1
                } else {
                    ACK_VECTOR_0
                }
            }
            Opt::DataDropped(_) => DATA_DROPPED,
            Opt::Timestamp(_) => TIMESTAMP,
            Opt::TimestampEcho { .. } => TIMESTAMP_ECHO,
            Opt::ElapsedTime(_) => ELAPSED_TIME,
            Opt::DataChecksum(_) => DATA_CHECKSUM,
            Opt::LossEventRate(_) => LOSS_EVENT_RATE,
            Opt::ReceiveRate(_) => RECEIVE_RATE,
            Opt::HostDrops(_) => HOST_DROPS,
            Opt::Other { kind, .. } => kind,
        };
        out[0] = kind;
        if len == 1 {
            return Ok(1);
        }
        out[1] = len as u8;
        let body = &mut out[2..];
        match *self {
            Opt::Feature { feature, value, .. } => {
                body[0] = feature;
                body[1..].copy_from_slice(value);
            }
            Opt::InitCookie(d) | Opt::DataDropped(d) | Opt::Other { data: d, .. } => {
                body.copy_from_slice(d)
            }
            Opt::AckVector { cells, .. } => body.copy_from_slice(cells),
            Opt::NdpCount(v) => {
                let n = body.len();
                body.copy_from_slice(&v.to_be_bytes()[8 - n..]);
            }
            Opt::Timestamp(v)
            | Opt::DataChecksum(v)
            | Opt::LossEventRate(v)
            | Opt::ReceiveRate(v)
            | Opt::HostDrops(v) => body.copy_from_slice(&v.to_be_bytes()),
            Opt::TimestampEcho { echo, elapsed } => {
                body[..4].copy_from_slice(&echo.to_be_bytes());
                elapsed.put(&mut body[4..]);
            }
            Opt::ElapsedTime(e) => e.put(body),
            _ => {}
        }
        Ok(len)
    }
}

fn ndp_len(v: u64) -> usize {
    (((64 - v.leading_zeros()) as usize).div_ceil(8)).clamp(1, 6)
}

/// Iterates the options in a packet's option area. Each item is the
/// option and whether a Mandatory option preceded it. A malformed option
/// ends the iteration with an error (sec. 5.8: Option Error).
#[derive(Clone, Debug)]
pub struct Options<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> Options<'a> {
    pub fn new(area: &'a [u8]) -> Self {
        Options {
            rest: area,
            failed: false,
        }
    }
}

impl<'a> Iterator for Options<'a> {
    type Item = Result<(Opt<'a>, bool), DccpError>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut mandatory = false;
        loop {
            if self.failed {
                return None;
            }
            let (&kind, after) = self.rest.split_first()?;
            if kind < 32 {
                self.rest = after;
                match kind {
                    PADDING => continue,
                    MANDATORY => {
                        if mandatory {
                            // Two Mandatory options in a row (sec. 5.8.2).
                            self.failed = true;
                            return Some(Err(DccpError::MandatoryError(MANDATORY)));
                        }
                        mandatory = true;
                        continue;
                    }
                    SLOW_RECEIVER => return Some(Ok((Opt::SlowReceiver, mandatory))),
                    k => return Some(Ok((Opt::ReservedSingle(k), mandatory))),
                }
            }
            let len = match after.first() {
                Some(&l) if l >= 2 && usize::from(l) <= self.rest.len() => usize::from(l),
                _ => {
                    self.failed = true;
                    return Some(Err(bad(kind)));
                }
            };
            let data = &self.rest[2..len];
            self.rest = &self.rest[len..];
            return Some(match Opt::decode(kind, data) {
                Ok(o) => Ok((o, mandatory)),
                Err(e) => {
                    self.failed = true;
                    Err(e)
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Opt<'static>> {
        vec![
            Opt::SlowReceiver,
            Opt::ReservedSingle(7),
            Opt::Feature {
                op: FeatOp::ChangeL,
                feature: 1,
                value: &[3, 2],
            },
            Opt::Feature {
                op: FeatOp::ConfirmR,
                feature: 3,
                value: &[],
            },
            Opt::Feature {
                op: FeatOp::ChangeR,
                feature: 5,
                value: &[0, 4],
            },
            Opt::Feature {
                op: FeatOp::ConfirmL,
                feature: 6,
                value: &[1, 1, 0],
            },
            Opt::InitCookie(&[9, 9, 9]),
            Opt::NdpCount(1),
            Opt::NdpCount(0x1_0000),
            Opt::NdpCount((1 << 48) - 1),
            Opt::AckVector {
                nonce: false,
                cells: &[0x05, 0xC0, 0x41],
            },
            Opt::AckVector {
                nonce: true,
                cells: &[],
            },
            Opt::DataDropped(&[0x00, 0xA1]),
            Opt::Timestamp(0xDEAD_BEEF),
            Opt::TimestampEcho {
                echo: 1,
                elapsed: Elapsed::None,
            },
            Opt::TimestampEcho {
                echo: 2,
                elapsed: Elapsed::Short(300),
            },
            Opt::TimestampEcho {
                echo: 3,
                elapsed: Elapsed::Long(70_000),
            },
            Opt::ElapsedTime(Elapsed::Short(5)),
            Opt::ElapsedTime(Elapsed::Long(1 << 20)),
            Opt::DataChecksum(42),
            Opt::LossEventRate(u32::MAX),
            Opt::ReceiveRate(125_000_000),
            Opt::HostDrops(0),
            Opt::HostDrops(u32::MAX),
            Opt::Other {
                kind: 130,
                data: &[1, 2, 3],
            },
        ]
    }

    #[test]
    fn every_option_round_trips() {
        let mut buf = [0u8; 512];
        let mut n = 0;
        buf[n] = MANDATORY;
        n += 1;
        for o in all() {
            n += o.encode(&mut buf[n..]).unwrap();
            buf[n] = PADDING;
            n += 1;
        }
        let got: Vec<_> = Options::new(&buf[..n]).map(Result::unwrap).collect();
        assert_eq!(got.len(), all().len());
        for (i, ((o, m), want)) in got.into_iter().zip(all()).enumerate() {
            assert_eq!(o, want);
            assert_eq!(m, i == 0, "only the first follows Mandatory");
        }
    }

    #[test]
    fn host_drops_is_option_120_with_a_four_byte_count() {
        let mut buf = [0u8; 8];
        assert_eq!(Opt::HostDrops(0x0102_0304).encode(&mut buf), Ok(6));
        assert_eq!(&buf[..6], &[120, 6, 1, 2, 3, 4]);
        let got: Vec<_> = Options::new(&buf[..6]).map(Result::unwrap).collect();
        assert_eq!(got, vec![(Opt::HostDrops(0x0102_0304), false)]);
    }

    #[test]
    fn malformed_options_are_errors_not_panics() {
        for area in [
            &[TIMESTAMP, 5, 0, 0, 0][..],
            &[TIMESTAMP, 1][..],
            &[ACK_VECTOR_0, 9, 1][..],
            &[ELAPSED_TIME, 5, 0, 0, 0][..],
            &[HOST_DROPS, 5, 0, 0, 7][..],
            &[CHANGE_L, 2][..],
            &[MANDATORY, MANDATORY, 2][..],
            &[200][..],
        ] {
            let r: Result<Vec<_>, _> = Options::new(area).collect();
            assert!(r.is_err(), "{area:?}");
        }
    }
}
