//! Thin Linux shells around the kernel interfaces xferlab measures through:
//! TCP_INFO, per-thread rusage, the /proc/net counter files and host
//! identity. Parsing and arithmetic live in `xferlab_core`; these modules
//! only make the system calls and read the files.

pub mod affinity;
pub mod counters;
pub mod cpu;
pub mod host;
pub mod tcp_info;
