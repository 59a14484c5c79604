//! The link emulator's model, sans-IO: per direction a pipeline of loss
//! model, queue (drop-tail, CoDel or FQ-CoDel), ECN marker, rate shaper and delay line, driven
//! by packet arrivals and a clock the driver passes in (nanoseconds); the
//! shaper may instead time frames as a USB network link carries them. The
//! TUN driver in the binary only moves bytes and keeps time.

mod aqm;
mod codel;
pub mod config;
mod delay;
mod fq_codel;
mod loss;
mod marker;
pub mod packet;
pub mod pipeline;
pub mod report;
pub mod rng;
mod shaper;
pub mod stats;
pub mod trace;
pub mod usb;

pub use config::{LinkConfig, LinkError};
pub use pipeline::{Arrival, Departure, DropCause, Link};
pub use report::LabReport;
