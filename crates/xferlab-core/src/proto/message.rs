//! Control messages: JSON objects tagged by `type`. Unknown fields are
//! ignored so a newer minor revision can add fields.

use serde::{Deserialize, Serialize};

use crate::result::{HostInfo, SideReport, Software};
use crate::spec::TestSpec;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    VersionMismatch,
    BadMessage,
    InvalidSpec,
    Busy,
    Timeout,
    Aborted,
    Internal,
    /// The client's answer to the server's challenge is wrong or missing.
    AuthFailed,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::VersionMismatch => "version_mismatch",
            ErrorCode::BadMessage => "bad_message",
            ErrorCode::InvalidSpec => "invalid_spec",
            ErrorCode::Busy => "busy",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Aborted => "aborted",
            ErrorCode::Internal => "internal",
            ErrorCode::AuthFailed => "auth_failed",
        }
    }
}

/// Client -> server.
// One Hello per test: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMsg {
    /// First message: what to run.
    Hello {
        software: Software,
        spec: TestSpec,
        /// How long the client gives its data connections to attach (its
        /// connect timeout, with retries on a lossy path); the server
        /// waits as long, within its limits (see `proto::attach_wait`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attach_wait_s: Option<f64>,
    },
    /// The answer to the server's [`ServerMsg::Challenge`]: hex of
    /// HMAC-SHA256 over its nonce and the hello (see `proto::auth`).
    Auth {
        mac: String,
    },
    /// End the test: stop sending, drain, then send results.
    Stop,
    /// The client's own measurements, sent after the server's arrived.
    Results {
        report: Box<SideReport>,
    },
    Error {
        code: ErrorCode,
        message: String,
    },
}

/// The server's answer to an acceptable `Hello`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Welcome {
    /// 32 hex digits; the data connections present it to join this test.
    pub session: String,
    pub software: Software,
    pub host: HostInfo,
    /// Longest test this server runs.
    pub max_duration_s: f64,
    /// UDP tests: the server's socket port for each flow, in flow order.
    /// The client sends each one an attach datagram (preamble + token +
    /// flow id) until it is acknowledged with one byte.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub udp_ports: Vec<u16>,
    /// rr tests: the port of this session's request/response socket (a
    /// TCP listener for tcp-rr and tcp-crr, a UDP socket for udp-rr), on
    /// the address the control connection reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rr_port: Option<u16>,
}

/// Server -> client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMsg {
    /// A server with authentication on, after the hello: prove you hold
    /// a key by answering this hex nonce with [`ClientMsg::Auth`].
    Challenge {
        nonce: String,
    },
    Welcome(Welcome),
    /// All data connections are attached: the test starts now.
    Start,
    /// The server's measurements, sent once its flows have drained.
    Results {
        report: Box<SideReport>,
    },
    Error {
        code: ErrorCode,
        message: String,
    },
}
