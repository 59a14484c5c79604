//! Batches of datagrams for sendmmsg/recvmmsg: buffers, iovecs and
//! message headers built once per flow and reused, so a batch costs one
//! system call and no allocation or setup.
//!
//! They call sendmmsg/recvmmsg (and send with GSO) through libc on
//! purpose: this is the per-datagram path, one system call per batch at
//! line rate. rustix has no recvmmsg, and its sendmmsg takes headers built
//! from borrowed slices on every call; here the headers are built once.
//!
//! Every type here hands the kernel raw pointers into its own heap
//! buffers (the iovecs point into the data buffer, the headers at the
//! iovecs and the control buffers). Those buffers are allocated once and
//! never grow (so never move). The pointers are (re)written right before
//! each system call, each derived from one `Vec::as_mut_ptr` base pointer
//! per buffer taken after the last Rust reference into that buffer (a
//! slot handed out, a message read): a pointer kept from construction
//! would be one that a later `&mut` to the buffer invalidated, by the
//! aliasing rules (Stacked/Tree Borrows). The call holds `&mut self`, so
//! no Rust reference to the buffers is live while the kernel uses them.
//! Rewriting costs a few stores per message in lines the call touches
//! anyway, against the system call's microseconds.

#[cfg(feature = "bytes")]
mod into;
mod recv;
mod send;
mod train;

#[cfg(feature = "bytes")]
pub use into::{RecvInto, Taken};
pub use recv::{Received, RecvBatch};
pub use send::SendBatch;
pub use train::TxBatch;
