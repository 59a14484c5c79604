//! The stream pattern over TCP: bulk transfer one way, reverse or both.

pub mod client;
pub mod datagram;
mod flow;
pub mod session;
pub mod side;

pub use side::{ConnectedFlow, FlowSocket, Side};
