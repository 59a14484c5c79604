//! Background load workers (`--load`): CPU spinners and memory workers
//! that allocate, touch every page and free, as `stress -c N -m M` does.
//! They are threads of this process, so they die with it, SIGKILL
//! included: nothing is left behind. Each measures its own CPU time
//! (per-thread rusage), which is what the result records.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use xferlab_core::load::{LoadReport, LoadSpec, WorkerLoad};

use super::cpu::thread_times;

/// Running workers; [`Load::stop`] ends them and reports.
pub struct Load {
    spec: LoadSpec,
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<WorkerLoad>>,
    started: Instant,
}

/// Pages between two looks at the stop flag: 256 x 4 KiB = 1 MiB, well
/// under a millisecond of page faults.
const PAGES_PER_CHECK: usize = 256;
const PAGE: usize = 4096;

impl Load {
    pub fn start(spec: LoadSpec) -> std::io::Result<Load> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut load = Load {
            spec,
            stop: Arc::clone(&stop),
            workers: Vec::new(),
            started: Instant::now(),
        };
        for i in 0..spec.cpu {
            let stop = Arc::clone(&stop);
            let h = std::thread::Builder::new()
                .name(format!("load-cpu{i}"))
                .spawn(move || measured("cpu", || spin(&stop)))?;
            load.workers.push(h);
        }
        for i in 0..spec.mem {
            let stop = Arc::clone(&stop);
            let bytes = usize::try_from(spec.vm_bytes).unwrap_or(usize::MAX);
            let h = std::thread::Builder::new()
                .name(format!("load-mem{i}"))
                .spawn(move || measured("mem", || touch(&stop, bytes)))?;
            load.workers.push(h);
        }
        Ok(load)
    }

    /// Stops the workers and returns what each achieved.
    pub fn stop(mut self) -> LoadReport {
        self.stop.store(true, Ordering::Relaxed);
        let workers = self
            .workers
            .drain(..)
            .filter_map(|h| h.join().ok())
            .collect();
        LoadReport {
            requested: self.spec,
            duration_s: self.started.elapsed().as_secs_f64(),
            workers,
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Runs `work` and reports its CPU share over its own wall time.
fn measured(kind: &str, work: impl FnOnce() -> Option<u64>) -> WorkerLoad {
    let t0 = Instant::now();
    let (u0, s0) = thread_times();
    let rounds = work();
    let (u1, s1) = thread_times();
    let wall = t0.elapsed().as_secs_f64();
    WorkerLoad {
        kind: kind.to_string(),
        cpu_percent: if wall > 0.0 {
            100.0 * ((u1 - u0) + (s1 - s0)) / wall
        } else {
            0.0
        },
        rounds,
    }
}

fn spin(stop: &AtomicBool) -> Option<u64> {
    let mut x: u64 = 1;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..10_000 {
            x = black_box(
                x.wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407),
            );
        }
    }
    None
}

fn touch(stop: &AtomicBool, bytes: usize) -> Option<u64> {
    let mut rounds = 0;
    'outer: while !stop.load(Ordering::Relaxed) {
        // Fresh zeroed memory each round: every page touched faults in, as
        // stress's malloc/dirty/free loop does.
        let mut buf = vec![0u8; bytes];
        for (i, page) in buf.chunks_mut(PAGE).enumerate() {
            page[0] = 1;
            if i % PAGES_PER_CHECK == 0 && stop.load(Ordering::Relaxed) {
                break 'outer;
            }
        }
        black_box(&buf);
        rounds += 1;
    }
    Some(rounds)
}
