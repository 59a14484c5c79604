//! USB bulk transport, sans-IO: descriptors (parsing what a device reports,
//! building what a FunctionFS gadget announces), a CDC network device's
//! descriptors and control requests (for raw-gadget), the SourceSink data
//! patterns, the bookkeeping of transfers in flight, the counters a run
//! reports, the meaning of the errors the kernel returns, a timing model
//! of the bus (what real controllers would achieve), and a radio-like
//! fixed-rate device buffer with its control requests (`usb cbr`). The usbfs and
//! FunctionFS drivers live in the binary crate.

pub mod cbr;
pub mod cdc_device;
pub mod descriptor;
pub mod errors;
pub mod ffs;
pub mod gadget;
pub mod model;
pub mod net;
pub mod pattern;
pub mod queue;
pub mod stats;
pub mod usbmon;

pub use descriptor::{BulkPipes, ConfigDesc, DescriptorError, EndpointDesc, InterfaceDesc};
pub use pattern::{Pattern, UnknownPattern};
pub use queue::TransferQueue;
pub use stats::{ErrorKind, UsbCounters};
