//! Batches of datagrams for sendmmsg/recvmmsg: buffers, iovecs and
//! message headers built once per flow and reused, so a batch costs one
//! system call and no allocation or setup.
//!
//! They call sendmmsg/recvmmsg (and send with GSO) through libc on
//! purpose: this is the per-datagram path, one system call per batch at
//! line rate. rustix has no recvmmsg, and its sendmmsg takes headers built
//! from borrowed slices on every call; here the headers are built once.
//!
//! Every type here keeps raw pointers into its own heap buffers (the
//! iovecs point into the data buffer, the headers at the iovecs and the
//! control buffers). Those buffers are allocated once, never grow (so
//! never move) and go with the value; the pointers are handed only to the
//! kernel, during a call that holds `&mut self`, so no Rust reference to
//! the buffers is live while the kernel uses them.

mod recv;
mod send;
mod train;

pub use recv::{Received, RecvBatch};
pub use send::SendBatch;
pub use train::TxBatch;
