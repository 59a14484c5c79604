//! The registry of patterns: which client and server sides run a test of
//! each [`Pattern`]. A new pattern is one line in each function.

use xferlab_core::spec::{Pattern, TestSpec};

use crate::session::client::{ClientEnv, ClientPattern};
use crate::session::server::SessionPattern;
use crate::session::PatternError;

/// The client side of `env`'s test, on xferlab's control protocol.
pub fn client(env: &ClientEnv<'_>) -> Result<Box<dyn ClientPattern>, PatternError> {
    match env.cfg.spec.pattern {
        Pattern::Stream => Ok(Box::new(crate::stream::client::StreamClient::default())),
        Pattern::Rr(_) => crate::rr::client::RrClient::new(env).map(|p| Box::new(p) as _),
    }
}

/// The server side of a test a client asked for.
pub fn session(spec: &TestSpec) -> Box<dyn SessionPattern> {
    match spec.pattern {
        Pattern::Stream => Box::new(crate::stream::session::StreamSession::new(spec.clone())),
        Pattern::Rr(_) => Box::new(crate::rr::session::RrSession::new(spec.clone())),
    }
}
