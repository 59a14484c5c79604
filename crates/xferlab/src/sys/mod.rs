//! Thin Linux shells around the kernel interfaces xferlab measures through
//! and runs on: TCP_INFO, per-thread rusage, the /proc/net counter files,
//! host identity, CPU model and caches, this machine's size calibration
//! file, CPU affinity, child processes, stop signals
//! and background load workers. Parsing
//! and arithmetic live in `xferlab_core`; these modules only make the
//! system calls (through rustix and signal-hook where they wrap them, and
//! `xferlab_sys`'s safe wrappers where only unsafe calls would) and read
//! the files.

pub mod affinity;
pub mod cache;
pub mod calibration;
pub mod clock;
pub mod counters;
pub mod cpu;
pub mod end;
pub mod host;
pub mod load;
pub mod process;
pub mod signals;
pub mod tcp_info;
