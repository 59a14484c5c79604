//! How much a byte-stream flow moves per system call and how its receiver
//! batches its wake-ups: iperf3's 128 KiB per write and read unless this
//! machine was calibrated (`xferlab calibrate`) or the command line says
//! otherwise. Pure: the caller looks up the calibration
//! (`crate::sys::calibration`) and records the choice in the result.
//!
//! # Why not a size derived from the cache
//!
//! On loopback a copying receive is one long `copy_to_user` from pages
//! the sender wrote moments ago, and a copying send reads the same user
//! buffer every call; both slow down once their buffers outgrow what the
//! core keeps close, so larger calls help up to a cliff and hurt past it.
//! Until 2026-11-29 the sizes were a formula of the L2 (writes of half of
//! it, reads of a quarter), fitted on the CPUs at hand. It misfired on
//! the next CPU each time, because where the cliff sits also depends on
//! the L3, the softirq work the sender does for the receiver and the
//! hypervisor. One flow (P=1) on loopback, `bench/tcp-vs-iperf3`,
//! throughput as a ratio to iperf3 3.21 in the same rounds:
//!
//! | CPU (L2 per core) | formula's write / read | ratio | a better size there |
//! |---|---|---|---|
//! | AMD EPYC Zen 3 (512 KiB) | 256K / 128K | 1.32 (an older 1M read: 0.49) | (the formula was fitted here) |
//! | AMD EPYC Zen 4 (1 MiB) | 512K / 256K | 1.36 | 256K writes: 1.18 |
//! | Intel Xeon (2 MiB) | 1M / 512K | 2.39 | told 512K of L2: 1.43 |
//! | Intel Xeon @ 2.5 GHz (1 MiB) | 512K / 256K | 0.75, 0.87 | 256K writes: 1.22 |
//!
//! (issue 35 has the last row's runs; the others are in this file's
//! history and bench/README.md.) So a size above iperf3's has to earn its
//! place by a measurement on the machine that runs the test: without one,
//! flows write and read [`DEFAULT_SIZE`], which is what a user compares
//! with, and `xferlab calibrate` measures candidates on this machine
//! (about 40 s) and keeps the winner when it beats the default. On the
//! 2 MiB Xeon it chose 1M writes and 128K filling reads for one flow:
//! 2.15x iperf3 3.21 at P=1, 1.06-1.18x at P=2-8 (bench/README.md).
//!
//! # Reads that fill a small buffer while a CPU is to spare
//!
//! iperf3 reads a block: each read() asks for what is left of its buffer
//! and the next block starts when the buffer is full (`Nrecv`). Asking
//! for the whole buffer every time (reading from its start) is what an
//! application that takes what comes would do, and is what xferlab did.
//! With fewer flows than usable CPUs the receiver has time to spare and
//! the sender is the bottleneck (one flow: client 3.4-3.9 CPU s, server
//! 1.5-1.7 in a 4 s run), and the filling reads measured faster; with as
//! many flows as CPUs or more every CPU is busy and they measured slower
//! (more, shorter calls). Which kernel path makes the difference at P=1
//! is not pinned down; the rule follows the measurement. Measured (AMD
//! EPYC Zen 3, 512 KiB L2, 2 vCPUs), `bench/tcp-vs-iperf3 --time 4`
//! with the fill as a variant (2026-11-28;
//! `--variant 'fill=--read-fill on' --variant 'whole=--read-fill off'`
//! repeats it), receiver Gbit/s, medians of interleaved rounds:
//!
//! | P | whole buffer | fill | rounds fill won |
//! |---|--------------|------|-----------------|
//! | 1 | 14.79 / 16.21 | 17.43 / 18.46 | 6 of 9, 5 of 7 |
//! | 1, `-l 128K` | 12.81 | 13.83 | 6 of 9 |
//! | 2 | 28.05 | 29.29 | 3 of 7 |
//! | 4 | 31.79 | 31.51 | 4 of 7 |
//! | 8 | 34.47 | 30.66 | 2 of 7 |
//!
//! On the Intel Xeon above (2 MiB L2, so 512K reads) the same A/B went
//! the other way at P=1: whole-buffer reads won 5 of 5 rounds, 46.0
//! against 41.2 Gbit/s. Varying the read size there with `--read-size`
//! (`--variant 'f256=--read-size 256K --read-fill on' --variant
//! 'w256=--read-size 256K --read-fill off'` and the same at 128K and
//! 512K; 7 interleaved 4 s rounds each, P=1, 2026-11-28) shows the size
//! decides, not the CPU:
//!
//! | read buffer | fill | whole | rounds fill won |
//! |-------------|------|-------|-----------------|
//! | 128K | 41.6 / 41.2 | 39.2 / 39.7 | 5 of 7, 4 of 7 |
//! | 256K | 45.4 | 46.9 | 1 of 7 |
//! | 512K (L2/4) | 44.6 | 47.3 | 1 of 7 |
//!
//! A likely reason, not measured: a filling read moves its destination
//! through the whole buffer, a whole-buffer read writes from its start
//! what has arrived, so a large buffer filled end to end keeps more of
//! L2 busy than the data in flight needs. So a receiver fills its buffer
//! when its side is not [`crowded`] and its buffer is at most
//! [`FILL_MAX`] (128K, where fill won on both CPUs), and reads the whole
//! buffer otherwise, unless `--read-fill` says; the result says which
//! (`socket.read_fill`).
//!
//! # Wake-ups and placement
//!
//! SO_RCVLOWAT batching (`--rcvlowat`) and pinning stay off unless asked
//! for: on loopback here, medians of 4 interleaved 3 s runs at P=1 (load
//! average ~7), the default did 25.4 Gbit/s at 0.232 CPU s/GB, with
//! `--rcvlowat 64K` 23.0 / 0.221, with `--rcvlowat 128K` 21.0 / 0.242;
//! pinned apart (`-A 0,1`) 10.2 / 0.417, pinned together (`-A 0,0`) 24.8 /
//! 0.206. On a shared 2-vCPU machine a pinned thread cannot get away from
//! a busy neighbour; the scheduler can. On the Intel Xeon (`--parallel
//! 1,2 --variant 'lowat=--rcvlowat 256K' --variant 'pin=--pin-flows'`, 5
//! interleaved 4 s rounds) `--rcvlowat 256K` did 41.8 / 45.5 Gbit/s at
//! P = 1 / 2 against the default's 40.4 / 47.0: no gain beyond noise.
//!
//! With more flows, `--pin-flows` puts flow i's two ends on CPU i (mod
//! n). Pinned with taskset (`bench/placement`), -P 2 moved 27-33
//! Gbit/s with each flow's ends sharing a CPU and 18-21 with them apart,
//! and the scheduler lands in either; yet in `bench/tcp-vs-iperf3
//! --variant` runs (2026-11-28, 3 interleaved 4 s rounds) the medians
//! pinned / unpinned were P=1 14.7 / 19.2 (one CPU idle), P=2 25.9 /
//! 26.7, P=4 28.5 / 29.8, P=8 25.2 / 29.0 Gbit/s: it removes the slow
//! case without raising the median, so it is an option too. On the Intel
//! Xeon (same run as the rcvlowat figures) P=2 did 47.8 pinned against
//! 47.0, and P=1 21.2 against 40.4 (both ends on one CPU).

use xferlab_core::result::{SizeCalibration, SizeSource};
use xferlab_core::spec::Knobs;

/// Write and read size without a calibration: iperf3's block (see the
/// module docs).
pub const DEFAULT_SIZE: usize = 128 << 10;
/// Largest read buffer that a receiver with a CPU to spare fills end to
/// end (see the module docs: 128K won on AMD Zen 3 and Intel, 256K and
/// 512K lost on Intel).
const FILL_MAX: usize = 128 << 10;

/// What one byte-stream flow uses: the sender the write size, the receiver
/// the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSizes {
    /// Bytes per write() (every send mode).
    pub write_size: usize,
    pub write_size_from: SizeSource,
    /// Bytes per read() (copy and zero-copy receive).
    pub read_size: usize,
    pub read_size_from: SizeSource,
    /// Largest SO_RCVLOWAT the receiver sets; 0: it never sets one.
    pub rcvlowat: usize,
    /// Copying receive: each read asks for the rest of the buffer, which
    /// fills to its end before the next starts at its beginning (see the
    /// module docs); false: every read asks for the whole buffer.
    pub read_fill: bool,
}

impl StreamSizes {
    /// The sizes a flow's end uses for `knobs` on a machine with
    /// `calibration` (None: not calibrated); `crowded`: this side runs at
    /// least as many flows as it may use CPUs (see [`crowded`]).
    pub fn for_flow(
        knobs: &Knobs,
        calibration: Option<&SizeCalibration>,
        crowded: bool,
    ) -> StreamSizes {
        let choice = calibration.map(|c| match (&c.crowded, crowded) {
            (Some(shared), true) => *shared,
            _ => c.alone,
        });
        let pick = |given: Option<u64>, measured: Option<u64>| match (given, measured) {
            (Some(n), _) => (as_usize(n), SizeSource::Option),
            (None, Some(n)) => (as_usize(n), SizeSource::Calibrated),
            (None, None) => (DEFAULT_SIZE, SizeSource::Default),
        };
        let (write_size, write_size_from) = pick(knobs.write_size, choice.map(|c| c.write_size));
        let (read_size, read_size_from) = pick(knobs.read_size, choice.map(|c| c.read_size));
        let read_fill = knobs.read_fill.unwrap_or(match choice {
            // The fill was measured with the size it came with.
            Some(c) if read_size_from == SizeSource::Calibrated => c.read_fill,
            _ => !crowded && read_size <= FILL_MAX,
        });
        StreamSizes {
            write_size,
            write_size_from,
            read_size,
            read_size_from,
            // A wake-up never asks for more than one read drains.
            rcvlowat: knobs.rcvlowat.map_or(0, as_usize).min(read_size),
            read_fill,
        }
    }
}

fn as_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// Whether a side's flows share its cores: as many data flows as usable
/// CPUs, or more (`-P` flows, twice that with `--bidir`).
pub fn crowded(flows: u64, usable_cpus: usize) -> bool {
    flows >= usable_cpus.max(1) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use xferlab_core::result::SizeChoice;

    fn choice(write: u64, read: u64, fill: bool) -> SizeChoice {
        SizeChoice {
            write_size: write << 10,
            read_size: read << 10,
            read_fill: fill,
            bps: 2e10,
            default_bps: 1e10,
        }
    }

    fn calibrated(crowded: Option<SizeChoice>) -> SizeCalibration {
        SizeCalibration {
            measured_unix_s: 1,
            cpu_model: "cpu".into(),
            kernel: "Linux 6.18".into(),
            l2: Some(1 << 20),
            cpus: 2,
            alone: choice(512, 256, false),
            crowded,
        }
    }

    #[test]
    fn without_a_calibration_flows_use_iperf3_s_block() {
        let k = Knobs::default();
        let s = StreamSizes::for_flow(&k, None, false);
        assert_eq!(
            (
                s.write_size,
                s.write_size_from,
                s.read_size,
                s.read_size_from
            ),
            (
                128 << 10,
                SizeSource::Default,
                128 << 10,
                SizeSource::Default
            )
        );
        assert_eq!(s.rcvlowat, 0, "no wake-up batching unless asked");
        assert!(s.read_fill, "a side with a CPU to spare fills its buffer");
        assert!(!StreamSizes::for_flow(&k, None, true).read_fill);
        let fills = |read_size| {
            let k = Knobs {
                read_size,
                ..Knobs::default()
            };
            StreamSizes::for_flow(&k, None, false).read_fill
        };
        assert!(fills(Some(64 << 10)), "up to 128K it fills");
        assert!(!fills(Some(129 << 10)), "larger: the whole buffer");
    }

    #[test]
    fn a_calibrated_machine_uses_its_choice_alone_or_crowded() {
        let k = Knobs::default();
        let c = calibrated(Some(choice(256, 128, false)));
        let s = StreamSizes::for_flow(&k, Some(&c), false);
        assert_eq!(
            (s.write_size, s.read_size, s.read_fill, s.write_size_from),
            (512 << 10, 256 << 10, false, SizeSource::Calibrated)
        );
        let s = StreamSizes::for_flow(&k, Some(&c), true);
        assert_eq!((s.write_size, s.read_size), (256 << 10, 128 << 10));
        // One CPU: one flow is crowded already, and `alone` was measured so.
        let one = calibrated(None);
        let s = StreamSizes::for_flow(&k, Some(&one), true);
        assert_eq!((s.write_size, s.read_size), (512 << 10, 256 << 10));
    }

    #[test]
    fn options_win_over_the_calibration_and_are_recorded() {
        let k = Knobs {
            write_size: Some(100_000),
            read_size: Some(64 << 10),
            rcvlowat: Some(1 << 20),
            ..Knobs::default()
        };
        let c = calibrated(None);
        let s = StreamSizes::for_flow(&k, Some(&c), false);
        assert_eq!(
            (
                s.write_size,
                s.write_size_from,
                s.read_size,
                s.read_size_from
            ),
            (100_000, SizeSource::Option, 64 << 10, SizeSource::Option)
        );
        assert_eq!(
            s.rcvlowat,
            64 << 10,
            "the wake-up batch is capped at one read"
        );
        assert!(
            s.read_fill,
            "a given read size follows the fill rule, not the calibration"
        );
        let k = Knobs {
            read_fill: Some(true),
            ..Knobs::default()
        };
        assert!(
            StreamSizes::for_flow(&k, Some(&c), true).read_fill,
            "--read-fill on wins"
        );
        assert!(!crowded(1, 2) && crowded(2, 2) && crowded(8, 2) && crowded(1, 1));
        assert!(crowded(1, 0), "an empty affinity mask counts as one CPU");
    }
}
