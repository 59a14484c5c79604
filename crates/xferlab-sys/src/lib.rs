//! `xferlab-sys`: every `unsafe` line of xferlab's binary, each behind a safe API.
//!
//! The binary (`crates/xferlab`) forbids unsafe code; what it needs of the
//! platform that neither std, socket2 nor rustix offers safely lives here,
//! one concern per module: socket options, batches of mmsghdrs, the
//! zero-copy paths, the epoll set; usbfs URBs, the usbmon ring, AIO,
//! raw-gadget, TUN/TAP devices; threads (waking, real-time scheduling),
//! fork-exec hooks and network namespaces, CPU time, interface addresses.
//! System calls go through rustix where it has them and through libc only
//! where it has not.
//!
//! The APIs are shaped for the data path: a batch owns its buffers and
//! message headers, is built once per flow and reused, and a call costs
//! one system call and no allocation, lock or formatting. File
//! descriptors come in borrowed (`impl AsFd`), never as raw numbers.

pub mod aio;
pub mod discard;
pub mod ifaddrs;
pub mod mmsg;
pub mod poller;
pub mod process;
pub mod raw_gadget;
pub mod rusage;
pub mod sockopt;
pub mod thread;
pub mod tun;
pub mod usbfs;
pub mod usbmon;
pub mod zerocopy;
