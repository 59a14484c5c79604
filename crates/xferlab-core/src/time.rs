//! The core's one time type: [`Time`], a point on the driver's monotonic
//! clock in nanoseconds since an origin the driver picks.
//!
//! Every state machine and model here (the control protocols, `TestRun`,
//! the rr tracker, the USB transfer queue, the datagram pacer, the link
//! emulator, DCCP) takes its time from the caller as a `Time` and never
//! reads a clock (clippy's `disallowed-methods` keeps it so); per-packet
//! models may count its nanoseconds inside. Unit tests start virtual time at
//! [`Time::ZERO`] and advance it by adding durations. Spans are
//! [`Duration`]s; results print seconds as `f64` (a unit of output, not a
//! clock), and the interval meters, which produce those results, take
//! their position as seconds since the side's start, which their driver
//! computes with [`Time::secs_since`]. Timestamps that travel in packets (a datagram's send time) are
//! data on the sender's wall clock, not a `Time`.

use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// Nanoseconds on the driver's monotonic clock. `u64` nanoseconds cover
/// 584 years: no test outlives its origin.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(u64);

impl Time {
    /// The origin: virtual time in tests starts here.
    pub const ZERO: Time = Time(0);

    pub const fn from_nanos(ns: u64) -> Time {
        Time(ns)
    }

    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Seconds since the origin (for results and logs).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// The span from `earlier` to `self`; zero when `earlier` is later
    /// (as `std::time::Instant` does).
    pub fn duration_since(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// The span from `earlier` to `self`, or None when `earlier` is later.
    pub fn checked_duration_since(self, earlier: Time) -> Option<Duration> {
        self.0.checked_sub(earlier.0).map(Duration::from_nanos)
    }

    /// Seconds from `start` to `self`, as results count them.
    pub fn secs_since(self, start: Time) -> f64 {
        self.0.saturating_sub(start.0) as f64 / 1e9
    }

    pub fn checked_sub(self, d: Duration) -> Option<Time> {
        u64::try_from(d.as_nanos())
            .ok()
            .and_then(|ns| self.0.checked_sub(ns))
            .map(Time)
    }

    pub fn checked_add(self, d: Duration) -> Option<Time> {
        u64::try_from(d.as_nanos())
            .ok()
            .and_then(|ns| self.0.checked_add(ns))
            .map(Time)
    }
}

/// Saturates at the end of time rather than wrapping: a deadline "never"
/// (`Duration::MAX` after now) stays later than every real time.
impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        self.checked_add(d).unwrap_or(Time(u64::MAX))
    }
}

impl AddAssign<Duration> for Time {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

/// Saturates at the origin.
impl Sub<Duration> for Time {
    type Output = Time;
    fn sub(self, d: Duration) -> Time {
        Time(
            self.0
                .saturating_sub(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }
}

/// The span between two times; zero when `rhs` is later.
impl Sub<Time> for Time {
    type Output = Duration;
    fn sub(self, rhs: Time) -> Duration {
        self.duration_since(rhs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_at_both_ends() {
        let t = Time::ZERO + Duration::from_millis(1500);
        assert_eq!(t.as_nanos(), 1_500_000_000);
        assert_eq!(t - Time::ZERO, Duration::from_millis(1500));
        assert_eq!(Time::ZERO - t, Duration::ZERO);
        assert_eq!(Time::ZERO.checked_duration_since(t), None);
        assert_eq!(
            t.checked_duration_since(Time::ZERO),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(Time::ZERO - Duration::from_secs(1), Time::ZERO);
        assert_eq!((t + Duration::MAX).as_nanos(), u64::MAX);
        assert_eq!(t.checked_add(Duration::MAX), None);
        assert_eq!(t.checked_sub(Duration::from_secs(2)), None);
        assert_eq!(t.checked_sub(t - Time::ZERO), Some(Time::ZERO));
        assert_eq!(t.secs_since(Time::from_nanos(500_000_000)), 1.0);
        let mut u = t;
        u += Duration::from_nanos(1);
        assert!(u > t);
    }
}
