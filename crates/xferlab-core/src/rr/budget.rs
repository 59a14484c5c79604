//! A sending rate shared by several threads without a lock: the rr
//! server's budget for its answers (UDP RR responses, CRR responses),
//! where any engine thread may answer any flow and what the client asks
//! for decides how much is sent. Clock-free: callers pass in their time.
//!
//! It is a GCRA (the "virtual scheduling" form of a token bucket): one
//! atomic theoretical arrival time, advanced by each answer's duration at
//! the rate. An answer may go once that time, less a small burst
//! tolerance, has come; a thread whose answer is due later waits for it
//! (the request stays in the socket's queue meanwhile, so a flood is
//! dropped by the kernel, not answered). An answer that could only go
//! later than the client still waits for it is dropped instead, and
//! counted.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::time::Time;

const NS_PER_S: u128 = 1_000_000_000;

/// How far ahead of the schedule answers may go (a burst of this much
/// of the rate). A sleeping thread wakes 50-100 us late on a loaded host;
/// 2 ms absorbs that without losing rate, and lets at most 2.5 KB over a
/// 10 Mbit/s budget go back to back.
pub const BURST_NS: u64 = 2_000_000;

/// When an answer may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Now.
    Now,
    /// At this time (the caller waits until then).
    At(Time),
    /// Not before the client gives up on it: do not send it.
    Drop,
}

/// A rate shared by the threads that answer for one test.
#[derive(Debug)]
pub struct SharedRate {
    rate_bps: u64,
    /// The longest an answer may wait for its slot.
    max_wait_ns: u64,
    /// Theoretical arrival time of the next answer, ns on the caller's
    /// clock (0: nothing sent yet).
    tat: AtomicU64,
    /// Answers that waited for their slot.
    held: AtomicU64,
    /// Answers dropped because their slot came too late.
    dropped: AtomicU64,
}

impl SharedRate {
    /// `rate_bps` bit/s (at least 1); an answer that would wait longer
    /// than `max_wait_ns` is dropped.
    pub fn new(rate_bps: u64, max_wait_ns: u64) -> Self {
        SharedRate {
            rate_bps: rate_bps.max(1),
            max_wait_ns,
            tat: AtomicU64::new(0),
            held: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    pub fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    /// Reserves the slot of an answer of `bytes` at `now`. O(1), no
    /// allocation; a compare-and-swap loop against other threads.
    pub fn reserve(&self, bytes: u64, now: Time) -> Slot {
        let now_ns = now.as_nanos();
        let cost = u64::try_from(u128::from(bytes) * 8 * NS_PER_S / u128::from(self.rate_bps))
            .unwrap_or(u64::MAX);
        let mut tat = self.tat.load(Relaxed);
        loop {
            let go = tat.saturating_sub(BURST_NS).max(now_ns);
            let wait = go - now_ns;
            if wait > self.max_wait_ns {
                self.dropped.fetch_add(1, Relaxed);
                return Slot::Drop;
            }
            let next = tat.max(now_ns).saturating_add(cost);
            match self.tat.compare_exchange_weak(tat, next, Relaxed, Relaxed) {
                Ok(_) if wait == 0 => return Slot::Now,
                Ok(_) => {
                    self.held.fetch_add(1, Relaxed);
                    return Slot::At(Time::from_nanos(go));
                }
                Err(seen) => tat = seen,
            }
        }
    }

    /// Answers that waited for their slot so far.
    pub fn held(&self) -> u64 {
        self.held.load(Relaxed)
    }

    /// Answers dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Sends as a thread would: answers of `bytes` as fast as the rate
    /// lets them go, from `from` for `for_ns`; returns bytes sent.
    fn run(r: &SharedRate, bytes: u64, from: u64, for_ns: u64) -> u64 {
        let mut t = from;
        let mut sent = 0;
        while t < from + for_ns {
            match r.reserve(bytes, Time::from_nanos(t)) {
                Slot::Now => sent += bytes,
                Slot::At(at) => {
                    t = at.as_nanos();
                    sent += bytes;
                }
                Slot::Drop => unreachable!("a lone sender never waits past the burst"),
            }
        }
        sent
    }

    #[test]
    fn a_busy_sender_gets_the_rate_and_a_burst_of_2_ms() {
        // 10 Mbit/s, 1250-byte answers: one per ms.
        let r = SharedRate::new(10_000_000, 1_000 * MS);
        let sent = run(&r, 1250, 5_000 * MS, 1_000 * MS);
        // 1 s at the rate, plus the 2 ms burst (and the first answer).
        assert_eq!(sent, 1_250_000 + 3 * 1250);
        assert!(r.held() > 990, "{}", r.held());
    }

    #[test]
    fn idle_time_is_not_saved_up() {
        let r = SharedRate::new(10_000_000, 1_000 * MS);
        run(&r, 1250, 5_000 * MS, 10 * MS);
        // A second later only the burst goes at once.
        let t = 6_000 * MS;
        let mut now = 0;
        while r.reserve(1250, Time::from_nanos(t)) == Slot::Now {
            now += 1;
        }
        assert_eq!(now, 3);
    }

    #[test]
    fn threads_share_one_rate() {
        use std::sync::Arc;
        let r = Arc::new(SharedRate::new(8_000_000, 1_000 * MS));
        let sent: u64 = (0..4)
            .map(|_| {
                let r = r.clone();
                std::thread::spawn(move || {
                    // Interleaved virtual clocks: each thread moves its
                    // own time to its slot, as a sleeping thread would.
                    let mut t = 10_000 * MS;
                    let mut sent = 0;
                    while t < 10_100 * MS {
                        match r.reserve(1000, Time::from_nanos(t)) {
                            Slot::At(at) => t = at.as_nanos(),
                            Slot::Now => t += 1000,
                            Slot::Drop => unreachable!(),
                        }
                        sent += 1000;
                    }
                    sent
                })
            })
            .map(|h| h.join().unwrap())
            .sum();
        // 100 ms at 1 MB/s is 100 kB, whatever the threads' interleaving
        // (each may overshoot by its last answer and the burst).
        assert!(
            (100_000..=100_000 + 2_000 + 5 * 1000).contains(&sent),
            "{sent}"
        );
    }

    #[test]
    fn an_answer_later_than_the_client_waits_is_dropped() {
        // 64 KiB answers at 1 Mbit/s take 524 ms each; the client waits 1 s.
        let r = SharedRate::new(1_000_000, 1_000 * MS);
        let t = Time::from_nanos(1_000 * MS);
        assert_eq!(r.reserve(65_536, t), Slot::Now);
        assert!(matches!(r.reserve(65_536, t), Slot::At(_)));
        assert_eq!(r.reserve(65_536, t), Slot::Drop);
        assert_eq!((r.held(), r.dropped()), (1, 1));
    }
}
