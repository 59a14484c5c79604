//! The session layer under the patterns: xferlab's control protocol on
//! both ends (hello, admission, tokens, where data threads run), what a
//! server's sessions share (limits, the registries of live sessions, the
//! log) and the plumbing that ties a session's helpers to its lifetime.

pub mod auth;
pub mod budget;
pub mod client;
mod error;
pub mod metrics;
pub mod server;
pub mod shared;
pub mod udp_door;

pub use error::{AdmitError, Busy, ClientError, PatternError};
pub use shared::{DoorLimits, ServerConfig, Shared};
