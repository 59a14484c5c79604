//! The stream pattern: bulk transfer one way, reverse or both, over any
//! registered transport (see [`crate::transport`]).

pub mod client;
pub mod session;
pub mod side;

pub use side::{ConnectedFlow, Side};
