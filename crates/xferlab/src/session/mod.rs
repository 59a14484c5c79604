//! The session layer under the patterns: xferlab's control protocol on
//! both ends (hello, admission, tokens, where data threads run, the
//! registry of live sessions), handing each test to its pattern.

pub mod client;
pub mod registry;
pub mod server;
