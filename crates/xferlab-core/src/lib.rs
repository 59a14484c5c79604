//! Sans-IO core of xferlab: everything here is plain, deterministic code
//! with no sockets, files or clocks of its own, so it is unit-tested with
//! virtual time and fuzzable. The `xferlab` crate wraps it in thin drivers.
//!
//! Guards: no `unsafe` here, and `clippy.toml` in this crate's directory
//! disallows `Instant::now` and `SystemTime::now`, so a clock can only
//! come in through a parameter.

#![forbid(unsafe_code)]

pub mod counters;
pub mod csum;
pub mod datagram;
pub mod dccp;
pub mod experiment;
#[cfg(any(test, feature = "fuzz"))]
pub mod fuzz;
pub mod interval;
pub mod iperf3;
pub mod jsondoc;
pub mod knobs;
pub mod latency;
pub mod link;
pub mod load;
pub mod outbox;
pub mod proto;
pub mod result;
pub mod rr;
pub mod run;
#[cfg(any(test, feature = "sample"))]
pub mod sample;
pub mod spec;
pub mod steal;
pub mod time;
pub mod transport;
pub mod units;
pub mod usb;
