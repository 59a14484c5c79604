//! Talking to stock iperf3 peers: thin drivers around the sans-IO
//! [`xferlab_core::iperf3`] state machines, reusing the stream pattern's
//! flows ([`crate::stream::Side`]) for the data.
//!
//! * [`client`]: `xferlab stream --iperf3 HOST` tests against an iperf3
//!   server.
//! * [`session`]: `xferlab server` serves iperf3 clients; the front door
//!   in [`crate::server`] recognises them by their cookie.

pub mod client;
mod error;
pub mod session;

pub use error::Iperf3Error;

use std::time::Duration;

/// Default port of iperf3 servers.
pub const IPERF3_PORT: u16 = 5201;

/// How long a peer may take to answer a UDP stream handshake (iperf3's
/// own client waits 30 s).
const UDP_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// After EXCHANGE_RESULTS (client) or TEST_END (server), how long flows
/// still running may take to notice before they are cut.
const RESULTS_DRAIN: Duration = Duration::from_secs(2);
