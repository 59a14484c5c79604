//! How much a byte-stream flow moves per system call and how its receiver
//! batches its wake-ups: the write and read sizes derived from the L2 cache
//! of the machine each end runs on unless the command line says otherwise.
//! Pure: the caller reads the caches (`sys::cache`) and records the choice
//! in the result.
//!
//! # Why the L2 cache
//!
//! A copying receive is one long `copy_to_user` from the socket's pages
//! (written moments ago by the sender, so in the sender's cache or L3)
//! into the read buffer. While the buffer and the stretch of socket data
//! being copied both fit in L2, the stores hit L2; once they do not, every
//! store line is fetched from L3 first and the receiver's cost per byte
//! triples. Measured on loopback, AMD EPYC (Zen 3, 512 KiB L2 per core,
//! 32 MiB L3), one flow, receiver CPU seconds per GB (median of 3):
//!
//! | read size | 64K  | 128K | 160K | 192K | 256K | 1M   |
//! |-----------|------|------|------|------|------|------|
//! | s/GB      | 0.11 | 0.10 | 0.40 | 0.37 | 0.34 | 0.25 |
//! | Gbit/s    | 24   | 29   | 12   | 13   | 13   | 7    |
//!
//! The cliff sits between L2/4 and L2/3 (a user-space memcpy into a
//! buffer re-used the same way falls off at 160-192K on the same CPU), so
//! [`L2_SHARE`] reads a quarter of L2. That is 64K on CPUs with 256 KiB
//! of L2 (Intel Skylake client), 256K with 1 MiB (Skylake-SP, Zen 4) and
//! 512K with 2 MiB (Sapphire Rapids). Before an Intel machine was at
//! hand the rule was tested by overriding the detected L2
//! (XFERLAB_L2_CACHE) on this CPU, medians of 3 interleaved 3 s runs,
//! load average 4-7 (the Intel measurement is further down):
//!
//! | L2 override | read | Gbit/s | receiver s/GB |
//! |-------------|------|--------|---------------|
//! | 128K        | 32K  | 15.1   | 0.26          |
//! | 512K (real) | 128K | 17.9   | 0.22          |
//! | 4M          | 1M   | 13.3   | 0.34          |
//!
//! Believing in a smaller L2 than the real one costs calls, not misses;
//! believing in a larger one makes reads overrun the real L2 and brings
//! the cliff back: the size has to come from the machine that reads.

//! # Why half of L2 per write
//!
//! A copying send reads the user buffer (the same one every call, so it
//! stays cached while it fits) and writes fresh socket pages. With the
//! source in L2, only the destination misses; once the source outgrows
//! L2 it is fetched from L3 on every call as well. On loopback the sender
//! also runs the receiver's TCP input (softirq), so what the sender saves
//! is throughput. Measured here (AMD EPYC, 512 KiB L2, reads of 128K),
//! P=1, `bench/tcp-vs-iperf3 --parallel 1 --variant ...`, medians of 3
//! interleaved 4 s rounds, load average 0.8-1.8, iperf3 3.21 in the same
//! rounds at 24.9 Gbit/s / 0.451 CPU s/GB:
//!
//! | write size | 64K   | 128K  | 256K  | 512K  | 1M    |
//! |------------|-------|-------|-------|-------|-------|
//! | Gbit/s     | 24.3  | 23.8  | 28.0  | 24.6  | 20.1  |
//! | CPU s/GB   | 0.486 | 0.340 | 0.299 | 0.278 | 0.529 |
//!
//! Below the cliff larger writes only save calls (64K pays in calls);
//! past it (1M, twice L2) the source's misses come back.
//! [`WRITE_L2_SHARE`] writes half of L2: 128K with 256 KiB of L2, 512K with
//! 1 MiB, 1M with 2 MiB. Both rules together, with the L2 overridden for
//! both ends (`--variant 'l2-128K=XFERLAB_L2_CACHE=128K'`), P=1, medians of
//! 3 interleaved 3 s rounds, load average 1.3-1.5, iperf3 3.21 at 21.6
//! Gbit/s / 0.570 CPU s/GB in the same rounds:
//!
//! | L2 override | write / read | Gbit/s | CPU s/GB |
//! |-------------|--------------|--------|----------|
//! | 128K        | 64K / 32K    | 21.6   | 0.566    |
//! | 512K (real) | 256K / 128K  | 28.6   | 0.447    |
//! | 4M          | 2M / 1M      | 16.2   | 0.643    |
//! | `-l 1M`     | 1M / 128K    | 15.6   | 0.712    |
//!
//! Again, a smaller L2 than the real one costs calls, a larger one misses.
//!
//! # A quarter of L2 per write when a core runs more than one flow
//!
//! Half of L2 assumes the sender has its core's L2 to itself. When a
//! side runs as many flows as it may use CPUs, or more, a core holds two
//! buffers: two senders' sources, or on loopback a sender's source and a
//! receiver's read buffer (the receiver of another flow, or the sender's
//! own softirq receive). Then each write fills a quarter of L2, as reads
//! do, and the result says `l2_cache_shared`. Measured on a second CPU,
//! AMD EPYC Zen 4 (1 MiB L2 per core, 32 MiB L3, 2 vCPUs), `bench/tcp-vs-iperf3
//! --time 4 --rounds 5 --variant 'w256=--length 256K' --variant
//! 'l2-512K=XFERLAB_L2_CACHE=512K'`, medians of 5 interleaved rounds,
//! load average 1.3-2.1, throughput and CPU s/GB as ratios to iperf3
//! 3.21 in the same rounds:
//!
//! | P | write 512K, read 256K (L2/2, L2/4) | write 256K (L2/4) | L2 told 512K (256K / 128K) |
//! |---|-------------|-------------|-------------|
//! | 1 | 1.36 / 0.76 | 1.18 / 0.86 | 1.19 / 0.85 |
//! | 2 | 1.04 / 0.93 | 1.08 / 0.90 | 0.90 / 1.10 |
//! | 4 | 0.98 / 1.02 | 1.01 / 0.99 | 0.98 / 1.01 |
//! | 8 | 1.09 / 0.92 | 1.13 / 0.88 | 1.09 / 0.92 |
//!
//! One flow per side gains from half of L2 (1.36 against 1.18); with a
//! flow per CPU or more, a quarter does better at every P. The last
//! column is the Zen 3 sizing on this CPU: believing in half the real L2
//! cost P=1 a seventh of its throughput (on Zen 3, believing in a larger
//! L2 did, above). With this rule in place, the next run of the same bench
//! without variants (load average 1.9-2.0) gave 1.43 / 1.24 / 1.06 / 1.23
//! at P = 1 / 2 / 4 / 8, CPU s/GB 0.71 / 0.79 / 0.94 / 0.82.
//!
//! # The same rules on an Intel CPU
//!
//! A third machine, Intel Xeon (family 6 model 167, AVX-512 and AMX, 2
//! MiB L2 per core, 2 vCPUs), ran the rules unchanged: write 1M and read
//! 512K with one flow per side, write 512K when crowded (and, then,
//! filling reads at P=1: see the next section for why they now stop at
//! 128K buffers). Interleaved with the Zen 3 sizing (L2 told 512K) and
//! a larger L2 (told 8M: write 4M, read 2M), `bench/tcp-vs-iperf3
//! --iperf3 /opt/iperf3-321/bin/iperf3 --iperf3 /usr/bin/iperf3 --time 4 --rounds 5 --variant
//! 'l2-512K=XFERLAB_L2_CACHE=512K' --variant 'l2-8M=XFERLAB_L2_CACHE=8M'`
//! (2026-11-28), receiver Gbit/s / CPU s/GB, medians of 5 rounds:
//!
//! | P | L2 2M (real) | told 512K | told 8M | iperf3 3.21 | iperf3 3.12 |
//! |---|--------------|-----------|---------|-------------|-------------|
//! | 1 | 47.5 / 0.255 | 28.5 / 0.386 | 31.1 / 0.362 | 19.9 / 0.535 | 20.8 / 0.526 |
//! | 2 | 47.4 / 0.330 | 46.3 / 0.339 | 41.9 / 0.257 | 45.9 / 0.333 | 23.6 / 0.484 |
//! | 4 | 51.5 / 0.303 | 46.0 / 0.336 | 42.3 / 0.251 | 45.6 / 0.339 | 26.6 / 0.436 |
//! | 8 | 54.0 / 0.286 | 46.5 / 0.333 | 41.4 / 0.263 | 46.6 / 0.334 | 26.5 / 0.439 |
//!
//! The peak sits at the real L2 at every P: believing in a quarter of it
//! lost 40 % of one flow's throughput, believing in four times it lost
//! 35 % (and at P >= 2 a tenth). Like for like (`-l 128K`, write size
//! equal) xferlab did 20.3 Gbit/s against 19.5 (3.21) and 21.4 (3.12).

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

use xferlab_core::result::{CacheSizes, SizeSource};
use xferlab_core::spec::Knobs;

/// The fraction of L2 one read fills (see the module docs).
const L2_SHARE: u64 = 4;
/// The fraction of L2 one write's source buffer fills (see the module
/// docs).
const WRITE_L2_SHARE: u64 = 2;
/// Reads and writes never go below this: a loopback TCP segment is up to
/// 64K, and smaller calls only add system calls.
const MIN_SIZE: u64 = 16 << 10;
/// Nor above this, whatever the L2 (no CPU's L2 makes a larger call pay).
const MAX_SIZE: u64 = 16 << 20;
/// Largest read buffer that a receiver with a CPU to spare fills end to
/// end (see the module docs: 128K won on AMD Zen 3 and Intel, 256K and
/// 512K lost on Intel).
const FILL_MAX: usize = 128 << 10;
/// Read and write size on a machine that does not report its L2: iperf3's
/// default block, a quarter of the smallest L2 of a current server CPU.
const FALLBACK_SIZE: u64 = 128 << 10;

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
    /// The sizes a flow's end on a machine with `caches` uses for `knobs`;
    /// `crowded`: this side runs at least as many flows as it may use
    /// CPUs (see [`crowded`]).
    pub fn for_flow(knobs: &Knobs, caches: &CacheSizes, crowded: bool) -> StreamSizes {
        let (read, read_from) = from_l2(knobs.read_size, caches, L2_SHARE);
        let (write, write_from) = if crowded {
            match from_l2(knobs.write_size, caches, L2_SHARE) {
                (n, SizeSource::L2Cache) => (n, SizeSource::L2CacheShared),
                other => other,
            }
        } else {
            from_l2(knobs.write_size, caches, WRITE_L2_SHARE)
        };
        let read_size = usize::try_from(read).unwrap_or(usize::MAX);
        StreamSizes {
            write_size: usize::try_from(write).unwrap_or(usize::MAX),
            write_size_from: write_from,
            read_size,
            read_size_from: read_from,
            // A wake-up never asks for more than one read drains.
            rcvlowat: knobs
                .rcvlowat
                .map_or(0, |l| usize::try_from(l).unwrap_or(usize::MAX))
                .min(read_size),
            read_fill: knobs.read_fill.unwrap_or(!crowded && read_size <= FILL_MAX),
        }
    }
}

/// Whether a side's flows share its cores: as many data flows as usable
/// CPUs, or more (`-P` flows, twice that with `--bidir`).
pub fn crowded(flows: u64, usable_cpus: usize) -> bool {
    flows >= usable_cpus.max(1) as u64
}

/// `given`, else `1/share` of L2 within bounds, else the fallback.
fn from_l2(given: Option<u64>, caches: &CacheSizes, share: u64) -> (u64, SizeSource) {
    match (given, caches.l2) {
        (Some(n), _) => (n, SizeSource::Option),
        (None, Some(l2)) => (
            page_floor(l2 / share).clamp(MIN_SIZE, MAX_SIZE),
            SizeSource::L2Cache,
        ),
        (None, None) => (FALLBACK_SIZE, SizeSource::Fallback),
    }
}

/// Rounded down to whole 4 KiB pages (TCP zero-copy receive maps pages).
fn page_floor(n: u64) -> u64 {
    n & !4095
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l2(n: u64) -> CacheSizes {
        CacheSizes {
            l2: Some(n),
            ..CacheSizes::default()
        }
    }

    #[test]
    fn reads_fill_a_quarter_of_l2_within_bounds() {
        let k = Knobs::default();
        let at = |c| StreamSizes::for_flow(&k, &c, false).read_size;
        assert_eq!(at(l2(512 << 10)), 128 << 10);
        assert_eq!(at(l2(256 << 10)), 64 << 10);
        assert_eq!(at(l2(1280 << 10)), 320 << 10);
        assert_eq!(at(l2(2 << 20)), 512 << 10);
        assert_eq!(at(l2(16 << 10)), 16 << 10);
        assert_eq!(at(l2(1 << 30)), 16 << 20);
        let s = StreamSizes::for_flow(&k, &l2(512 << 10), false);
        assert_eq!(
            (s.read_size_from, s.rcvlowat),
            (SizeSource::L2Cache, 0),
            "no wake-up batching unless asked"
        );
        assert!(s.read_fill, "a side with a CPU to spare fills its buffer");
        let fills = |l2_bytes, read_size| {
            let k = Knobs {
                read_size,
                ..Knobs::default()
            };
            StreamSizes::for_flow(&k, &l2(l2_bytes), false).read_fill
        };
        assert!(!fills(1 << 20, None), "256K reads: the whole buffer");
        assert!(!fills(2 << 20, None), "512K reads: the whole buffer");
        assert!(fills(2 << 20, Some(128 << 10)), "up to 128K it fills");
        assert!(!fills(512 << 10, Some(129 << 10)));
    }

    #[test]
    fn writes_fill_half_of_l2_and_the_option_wins() {
        let k = Knobs::default();
        let at = |c| {
            let s = StreamSizes::for_flow(&k, &c, false);
            (s.write_size, s.write_size_from)
        };
        assert_eq!(at(l2(512 << 10)), (256 << 10, SizeSource::L2Cache));
        assert_eq!(at(l2(256 << 10)), (128 << 10, SizeSource::L2Cache));
        assert_eq!(at(l2(2 << 20)), (1 << 20, SizeSource::L2Cache));
        assert_eq!(at(l2(16 << 10)), (16 << 10, SizeSource::L2Cache));
        assert_eq!(at(CacheSizes::default()), (128 << 10, SizeSource::Fallback));
        let k = Knobs {
            write_size: Some(100_000),
            ..Knobs::default()
        };
        let s = StreamSizes::for_flow(&k, &l2(512 << 10), false);
        assert_eq!(
            (s.write_size, s.write_size_from),
            (100_000, SizeSource::Option)
        );
    }

    #[test]
    fn a_crowded_side_writes_a_quarter_of_l2_and_says_so() {
        let k = Knobs::default();
        let s = StreamSizes::for_flow(&k, &l2(1 << 20), true);
        assert_eq!(
            (s.write_size, s.write_size_from, s.read_size, s.read_fill),
            (256 << 10, SizeSource::L2CacheShared, 256 << 10, false)
        );
        let s = StreamSizes::for_flow(&k, &CacheSizes::default(), true);
        assert_eq!(
            (s.write_size, s.write_size_from),
            (128 << 10, SizeSource::Fallback)
        );
        let k = Knobs {
            write_size: Some(100_000),
            ..Knobs::default()
        };
        let s = StreamSizes::for_flow(&k, &l2(1 << 20), true);
        assert_eq!(
            (s.write_size, s.write_size_from),
            (100_000, SizeSource::Option)
        );
        let k = Knobs {
            read_fill: Some(true),
            ..Knobs::default()
        };
        assert!(
            StreamSizes::for_flow(&k, &l2(1 << 20), true).read_fill,
            "--read-fill on wins on a crowded side"
        );
        assert!(!crowded(1, 2) && crowded(2, 2) && crowded(8, 2) && crowded(1, 1));
        assert!(crowded(1, 0), "an empty affinity mask counts as one CPU");
    }

    #[test]
    fn an_unknown_l2_falls_back_and_the_option_wins() {
        let k = Knobs::default();
        let s = StreamSizes::for_flow(&k, &CacheSizes::default(), false);
        assert_eq!(
            (s.read_size, s.read_size_from),
            (128 << 10, SizeSource::Fallback)
        );
        let k = Knobs {
            read_size: Some(100_000),
            rcvlowat: Some(1 << 20),
            ..Knobs::default()
        };
        let s = StreamSizes::for_flow(&k, &l2(512 << 10), false);
        assert_eq!(
            (s.read_size, s.read_size_from, s.rcvlowat),
            (100_000, SizeSource::Option, 100_000),
            "the wake-up batch is capped at one read"
        );
    }
}
