//! Agents (`xferlab server --agent`): a controller holding one of the
//! server's keys orders this host to run an xferlab test as the client
//! against a third host, and gets the result document back. [`order`] is
//! the policy (what an order may ask for) and the child process that runs
//! it; the wire and the controller's side sit beside it.

pub mod client;
pub mod order;
pub mod session;
mod wire;
