//! A device's fixed-rate buffer, as a radio's FPGA keeps one: samples fall
//! due at an exact rate and go into the buffer (a source, the RX side:
//! device to host) or come out of it (a sink, the TX side: host to device),
//! while the host drains or fills it in transfers. A due sample that finds
//! the source's buffer full is an **overrun** (the sample is lost); one that
//! finds the sink's buffer empty is an **underrun**. Both are counted per
//! sample and in episodes (runs of consecutive faulty samples), with the
//! times of the first [`KEPT_EPISODES`] episodes.
//!
//! Sans-IO: time is u64 nanoseconds passed in by the driver; the sample
//! clock never drifts (the due time of sample k is computed from k, not
//! accumulated), and nothing allocates after [`RateBuffer::new`].

/// Episodes whose times are kept (the counts go on past them).
pub const KEPT_EPISODES: usize = 16;

/// Which side of the stream the device is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// RX: the device produces samples into the buffer; the host drains it.
    Source,
    /// TX: the device consumes samples from the buffer; the host fills it.
    /// The sample clock starts once the buffer first holds `prefill` bytes
    /// (a radio starts transmitting on the first data, not before).
    Sink { prefill: u64 },
}

/// A run of consecutive due samples that found the buffer full (source)
/// or empty (sink).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Episode {
    /// Due time of its first sample, ns since [`RateBuffer::start`].
    pub start_ns: u64,
    pub samples: u64,
}

/// Overruns or underruns: samples, episodes and the first episodes' times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Faults {
    pub samples: u64,
    pub episodes: u64,
    /// The first `min(episodes, KEPT_EPISODES)` entries are valid.
    pub first: [Episode; KEPT_EPISODES],
}

impl Faults {
    /// The kept episodes.
    pub fn kept(&self) -> &[Episode] {
        &self.first[..(self.episodes as usize).min(KEPT_EPISODES)]
    }

    /// `n` faulty samples from sample index `k` (1-based) due at `t_ns`;
    /// `continues`: sample k-1 was faulty too, so they extend its episode.
    fn add(&mut self, n: u64, t_ns: u64, continues: bool) {
        if n == 0 {
            return;
        }
        if !continues {
            if (self.episodes as usize) < KEPT_EPISODES {
                self.first[self.episodes as usize] = Episode {
                    start_ns: t_ns,
                    samples: 0,
                };
            }
            self.episodes += 1;
        }
        if let Some(e) = self.first.get_mut(self.episodes as usize - 1) {
            e.samples += n;
        }
        self.samples += n;
    }
}

/// Why a rate buffer cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    #[error("the rate must be at least 1 byte/s")]
    ZeroRate,
    #[error("a sample must be at least 1 byte")]
    ZeroSample,
    #[error("the buffer ({capacity} B) must hold at least one sample ({sample} B)")]
    BufferTooSmall { capacity: u64, sample: u64 },
    #[error("the prefill ({prefill} B) must be 1 byte to the buffer's {capacity} B")]
    Prefill { prefill: u64, capacity: u64 },
}

/// What the buffer did, for the device's report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateReport {
    /// Sink: ns from start until the sample clock started (prefill reached);
    /// None while it has not. Source: Some(0).
    pub clock_start_ns: Option<u64>,
    /// Samples that fell due.
    pub samples_due: u64,
    /// Bytes of the samples that went into (source) or came out of (sink)
    /// the buffer.
    pub sample_bytes: u64,
    /// Bytes the host took (source) or gave (sink).
    pub host_bytes: u64,
    pub fill: u64,
    pub max_fill: u64,
    /// Lowest fill once the sample clock runs (a sink's margin; 0 for a
    /// source, which starts empty).
    pub min_fill: u64,
    pub overruns: Faults,
    pub underruns: Faults,
}

#[derive(Debug, Clone)]
pub struct RateBuffer {
    role: Role,
    /// Bytes per second.
    rate: u64,
    sample: u64,
    capacity: u64,
    /// When `start` was called.
    origin: Option<u64>,
    /// When the sample clock started (source: at start; sink: at prefill).
    clock0: Option<u64>,
    /// The last processed sample was faulty (an episode is open).
    in_fault: bool,
    report: RateReport,
}

impl RateBuffer {
    pub fn new(role: Role, rate: u64, sample: u64, capacity: u64) -> Result<Self, RateError> {
        if rate == 0 {
            return Err(RateError::ZeroRate);
        }
        if sample == 0 {
            return Err(RateError::ZeroSample);
        }
        if capacity < sample {
            return Err(RateError::BufferTooSmall { capacity, sample });
        }
        if let Role::Sink { prefill } = role {
            if prefill == 0 || prefill > capacity {
                return Err(RateError::Prefill { prefill, capacity });
            }
        }
        Ok(RateBuffer {
            role,
            rate,
            sample,
            capacity,
            origin: None,
            clock0: None,
            in_fault: false,
            report: RateReport::default(),
        })
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    pub fn fill(&self) -> u64 {
        self.report.fill
    }

    /// Bytes the buffer can still take.
    pub fn space(&self) -> u64 {
        self.capacity - self.report.fill
    }

    /// The stream begins at `now`: a source's sample clock starts; a sink's
    /// waits for its prefill.
    pub fn start(&mut self, now: u64) {
        self.origin = Some(now);
        if self.role == Role::Source {
            self.clock0 = Some(now);
            self.report.clock_start_ns = Some(0);
        }
    }

    /// Samples due by `now` since the sample clock started.
    fn due_by(&self, now: u64) -> u64 {
        match self.clock0 {
            Some(c) if now > c => {
                ((now - c) as u128 * self.rate as u128 / (self.sample as u128 * 1_000_000_000))
                    as u64
            }
            _ => 0,
        }
    }

    /// Due time of sample `k` (1-based), ns since the sample clock started:
    /// the first ns by which `due_by` counts it.
    fn due_offset(&self, k: u64) -> u64 {
        let num = k as u128 * self.sample as u128 * 1_000_000_000;
        num.div_ceil(self.rate as u128) as u64
    }

    /// Absolute time at which sample `k` falls due (None before the clock runs).
    pub fn due_time(&self, k: u64) -> Option<u64> {
        self.clock0.map(|c| c + self.due_offset(k))
    }

    /// When the next sample falls due: the driver's next wake-up.
    pub fn next_due(&self) -> Option<u64> {
        self.due_time(self.report.samples_due + 1)
    }

    /// Source: when the fill reaches `level` bytes if the host takes nothing
    /// (now, if it already has; None if the buffer cannot hold it).
    pub fn time_of_fill(&self, level: u64) -> Option<u64> {
        if level > self.capacity || self.role != Role::Source {
            return None;
        }
        if self.report.fill >= level {
            return self.due_time(self.report.samples_due);
        }
        let samples = (level - self.report.fill).div_ceil(self.sample);
        self.due_time(self.report.samples_due + samples)
    }

    /// Sink: when the space reaches `level` bytes if the host gives nothing
    /// (None before the sample clock runs, or if the buffer cannot hold it).
    pub fn time_of_space(&self, level: u64) -> Option<u64> {
        if level > self.capacity || self.role == Role::Source {
            return None;
        }
        let space = self.space();
        if space >= level {
            return self.due_time(self.report.samples_due);
        }
        let samples = (level - space).div_ceil(self.sample);
        self.due_time(self.report.samples_due + samples)
    }

    /// Accounts for every sample due by `now`, in order.
    pub fn advance(&mut self, now: u64) {
        let due = self.due_by(now);
        if due <= self.report.samples_due {
            return;
        }
        let n = due - self.report.samples_due;
        let first = self.report.samples_due + 1;
        let fill = self.report.fill;
        // How many of the n samples the buffer serves before it is full/empty.
        let served = match self.role {
            Role::Source => (self.capacity - fill) / self.sample,
            Role::Sink { .. } => fill / self.sample,
        }
        .min(n);
        let faulty = n - served;
        match self.role {
            Role::Source => self.report.fill += served * self.sample,
            Role::Sink { .. } => self.report.fill -= served * self.sample,
        }
        self.report.sample_bytes += served * self.sample;
        if faulty > 0 {
            let k = first + served;
            let t = self.due_offset(k) + self.clock0.unwrap_or(0) - self.origin.unwrap_or(0);
            let continues = self.in_fault && served == 0;
            let f = match self.role {
                Role::Source => &mut self.report.overruns,
                Role::Sink { .. } => &mut self.report.underruns,
            };
            f.add(faulty, t, continues);
        }
        self.in_fault = faulty > 0;
        self.report.samples_due = due;
        self.note_fill();
    }

    fn note_fill(&mut self) {
        let f = self.report.fill;
        self.report.max_fill = self.report.max_fill.max(f);
        if self.clock0.is_some() {
            self.report.min_fill = self.report.min_fill.min(f);
        }
    }

    /// Source: the host took `bytes` (a transfer completed). More than the
    /// fill is the driver's bug; it is clamped.
    pub fn drained(&mut self, bytes: u64) {
        let b = bytes.min(self.report.fill);
        self.report.fill -= b;
        self.report.host_bytes += b;
    }

    /// Sink: the host gave `bytes` at `now` (clamped to the space: the
    /// device only asks for what fits). The first time the fill reaches
    /// the prefill, the sample clock starts.
    pub fn filled(&mut self, now: u64, bytes: u64) {
        let b = bytes.min(self.space());
        self.report.fill += b;
        self.report.host_bytes += b;
        if let Role::Sink { prefill } = self.role {
            if self.clock0.is_none() && self.report.fill >= prefill {
                self.clock0 = Some(now);
                self.report.clock_start_ns = Some(now - self.origin.unwrap_or(now));
                self.report.min_fill = self.report.fill;
            }
        }
        self.note_fill();
    }

    pub fn report(&self) -> RateReport {
        self.report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// 1000 B/s in 100-byte samples: one sample every 100 ms; 300 B buffer.
    fn source() -> RateBuffer {
        let mut b = RateBuffer::new(Role::Source, 1000, 100, 300).unwrap();
        b.start(5_000 * MS);
        b
    }

    #[test]
    fn a_source_overruns_when_the_host_does_not_drain() {
        let mut b = source();
        let t0 = 5_000 * MS;
        b.advance(t0 + 250 * MS);
        assert_eq!((b.fill(), b.report().samples_due), (200, 2));
        assert_eq!(b.next_due(), Some(t0 + 300 * MS));
        assert_eq!(b.time_of_fill(300), Some(t0 + 300 * MS));
        // Samples 3 (fits), 4 and 5 (buffer full: overruns at 400 and 500 ms).
        b.advance(t0 + 500 * MS);
        let r = b.report();
        assert_eq!(
            (r.fill, r.overruns.samples, r.overruns.episodes),
            (300, 2, 1)
        );
        assert_eq!(
            r.overruns.kept(),
            &[Episode {
                start_ns: 400 * MS,
                samples: 2
            }]
        );
        // The same episode goes on at 600 ms, since nothing was drained.
        b.advance(t0 + 650 * MS);
        assert_eq!(b.report().overruns.kept()[0].samples, 3);
        // The host takes 200 B at 650 ms: samples 7 and 8 fit, 9 (at 900)
        // starts a second episode.
        b.drained(200);
        b.advance(t0 + 900 * MS);
        let r = b.report();
        assert_eq!((r.overruns.samples, r.overruns.episodes), (4, 2));
        assert_eq!(
            r.overruns.kept()[1],
            Episode {
                start_ns: 900 * MS,
                samples: 1
            }
        );
        assert_eq!((r.samples_due, r.sample_bytes, r.host_bytes), (9, 500, 200));
        assert_eq!((r.max_fill, r.underruns.samples), (300, 0));
        assert_eq!(r.clock_start_ns, Some(0));
    }

    #[test]
    fn a_source_drained_in_time_never_overruns() {
        // 32 MB/s in 4-byte samples into 64 KiB, drained 16 KiB at a time
        // whenever 16 KiB are there (one every 512 us), for 10 s.
        let mut b = RateBuffer::new(Role::Source, 32_000_000, 4, 65_536).unwrap();
        b.start(0);
        let mut taken = 0;
        // 19531 x 512 us = 9.999872 s.
        for _ in 0..19_531 {
            let t = b.time_of_fill(16_384).unwrap();
            b.advance(t);
            b.drained(16_384);
            taken += 16_384;
        }
        let r = b.report();
        assert_eq!(r.overruns.samples, 0);
        assert_eq!(r.host_bytes, taken);
        assert_eq!(r.samples_due * 4, r.sample_bytes);
        assert!(r.max_fill <= 16_384, "{}", r.max_fill);
        assert_eq!(r.samples_due, 19_531 * 4_096);
        // The clock does not drift: 10 s at 32 MB/s is 80 M samples.
        b.advance(10_000 * MS);
        assert_eq!(b.report().samples_due, 80_000_000);
    }

    #[test]
    fn a_sink_waits_for_its_prefill_then_underruns_when_starved() {
        // 1000 B/s, 100 B samples, 400 B buffer, starts at 200 B.
        let mut b = RateBuffer::new(Role::Sink { prefill: 200 }, 1000, 100, 400).unwrap();
        b.start(0);
        b.advance(1_000 * MS);
        assert_eq!(b.report().samples_due, 0, "no clock before the prefill");
        b.filled(1_000 * MS, 100);
        assert_eq!(b.report().clock_start_ns, None);
        b.filled(1_050 * MS, 200);
        assert_eq!(b.report().clock_start_ns, Some(1_050 * MS));
        // 3 samples at 1150, 1250, 1350 ms; the 4th (1450) and 5th find it empty.
        b.advance(1_550 * MS);
        let r = b.report();
        assert_eq!((r.fill, r.samples_due, r.sample_bytes), (0, 5, 300));
        assert_eq!(
            r.underruns.kept(),
            &[Episode {
                start_ns: 1_450 * MS,
                samples: 2
            }]
        );
        assert_eq!((r.min_fill, r.max_fill, r.overruns.samples), (0, 300, 0));
        // Fed again: one sample served, then a new episode at 1750 ms.
        b.filled(1_600 * MS, 100);
        b.advance(1_750 * MS);
        let r = b.report();
        assert_eq!((r.underruns.samples, r.underruns.episodes), (3, 2));
        assert_eq!(r.underruns.kept()[1].start_ns, 1_750 * MS);
        // Space is what the buffer can take; more is clamped.
        b.filled(1_800 * MS, 1_000);
        assert_eq!((b.fill(), b.space(), b.report().host_bytes), (400, 0, 800));
        // Full: 400 B of space once samples 8 to 11 are gone.
        assert_eq!(b.time_of_space(400), Some(2_150 * MS));
        assert_eq!(b.time_of_space(401), None);
    }

    #[test]
    fn episodes_past_the_kept_ones_are_still_counted() {
        let mut b = source();
        let mut t = 5_000 * MS;
        for _ in 0..40 {
            // Fill it, overrun one sample, drain one sample.
            t += 400 * MS;
            b.advance(t);
            b.drained(b.fill());
        }
        let r = b.report();
        assert_eq!(r.overruns.episodes, 40);
        assert_eq!(r.overruns.samples, 40);
        assert_eq!(r.overruns.kept().len(), KEPT_EPISODES);
        assert_eq!(r.overruns.kept()[0].start_ns, 400 * MS);
        assert_eq!(r.overruns.kept()[1].start_ns, 800 * MS);
    }

    #[test]
    fn odd_rates_fall_due_exactly() {
        // 3 B/s in 2-byte samples: due at 666.67 ms -> 666_666_667 ns.
        let mut b = RateBuffer::new(Role::Source, 3, 2, 2).unwrap();
        b.start(0);
        assert_eq!(b.next_due(), Some(666_666_667));
        b.advance(666_666_666);
        assert_eq!(b.report().samples_due, 0);
        b.advance(666_666_667);
        assert_eq!(b.report().samples_due, 1);
        b.advance(1_333_333_334);
        assert_eq!(b.report().overruns.kept()[0].start_ns, 1_333_333_334);
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert_eq!(
            RateBuffer::new(Role::Source, 0, 4, 8).unwrap_err(),
            RateError::ZeroRate
        );
        assert!(RateBuffer::new(Role::Source, 1, 0, 8).is_err());
        assert!(RateBuffer::new(Role::Source, 1, 16, 8)
            .unwrap_err()
            .to_string()
            .contains("at least one sample"));
        assert!(RateBuffer::new(Role::Sink { prefill: 9 }, 1, 4, 8).is_err());
        assert!(RateBuffer::new(Role::Sink { prefill: 0 }, 1, 4, 8).is_err());
    }
}
