//! The controller's side: send an order to an agent, pass on the lines
//! of its test as they come, return its result. A dead agent is found
//! promptly: a connect that fails or times out is `Unreachable`; a
//! connection that resets or closes mid-order, or an agent silent for
//! longer than its keepalives allow ([`SILENCE`]), is `Lost`.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use xferlab_core::proto::order::{ControllerEvent, ControllerOrder, SILENCE};

use super::order::Outcome;
use super::wire::{drive, Driven};
use crate::net::{self, Family, DEFAULT_PORT};
use crate::sys::clock;

/// How long a connect to an agent may take (per address).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why an order did not bring back a good result: one line each.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("cannot reach agent {agent}: {err}")]
    Unreachable { agent: String, err: String },
    /// `code` is the agent's word for why (`busy`, `target`, `budget`,
    /// `auth`, ...; see `agent::order::Refusal::code`).
    #[error("agent {agent} refused the order: {reason}")]
    Refused {
        agent: String,
        code: String,
        reason: String,
    },
    /// The connection dropped or fell silent mid-order, after `lines`
    /// lines of output.
    #[error("lost agent {agent} after {lines} lines of output: {reason}")]
    Lost {
        agent: String,
        lines: u64,
        reason: String,
    },
    /// The order ran and its test failed; `doc` is its result where it
    /// has one (status `failed`, partial figures).
    #[error("the order failed on agent {agent}: {reason}")]
    Failed {
        agent: String,
        reason: String,
        doc: Option<serde_json::Value>,
    },
    /// The agent's version (or kind of server) cannot serve orders.
    #[error("agent {agent} cannot take this order: {reason}")]
    Version { agent: String, reason: String },
    /// [`order_until`]'s stop count went above 0: the connection is closed,
    /// which stops the order's test on the agent.
    #[error("the order on agent {agent} was stopped here")]
    Stopped { agent: String },
}

/// Sends `argv` (an xferlab command line without the program name) to
/// `agent` (HOST or HOST:PORT, default port 5290), signed with `key`;
/// each line of the test's output goes to `on_line` as it comes. Ok: the
/// test ran and exited 0; its result document is `doc`.
/// `xferlab run` across hosts calls this; `xferlab order` uses
/// [`order_until`] for its Ctrl-C.
pub fn order(
    agent: &str,
    key: &[u8],
    argv: &[String],
    on_line: &mut dyn FnMut(&str),
) -> Result<Outcome, AgentError> {
    order_until(agent, key, argv, None, on_line)
}

/// [`order`], given up once `stop` is above 0 (the binary's count of
/// Ctrl-C presses, as `xferlab run` has it): the connection closes and
/// the agent kills the order's test.
pub fn order_until(
    agent: &str,
    key: &[u8],
    argv: &[String],
    stop: Option<&AtomicU32>,
    on_line: &mut dyn FnMut(&str),
) -> Result<Outcome, AgentError> {
    let name = agent.to_string();
    let unreachable = |err: String| AgentError::Unreachable {
        agent: name.clone(),
        err,
    };
    let addrs =
        net::resolve(agent, DEFAULT_PORT, Family::Any).map_err(|e| unreachable(e.to_string()))?;
    let mut stream = connect(&addrs).map_err(unreachable)?;
    stream.set_nodelay(true).ok();
    // A write can block only as long as the agent may stay silent.
    stream.set_write_timeout(Some(SILENCE)).ok();
    net::keepalive(&stream);
    let mut m = ControllerOrder::new(clock::now(), crate::software(), argv.to_vec(), key.to_vec());
    loop {
        let ev = match drive(&mut stream, &mut m, stop) {
            Driven::Event(ev) => ev,
            Driven::Closed => break,
            Driven::Stopped => {
                stream.shutdown(std::net::Shutdown::Both).ok();
                return Err(AgentError::Stopped { agent: name });
            }
        };
        match ev {
            ControllerEvent::Accepted { .. } => {}
            ControllerEvent::Line(text) => on_line(&text),
            ControllerEvent::Refused {
                code,
                reason,
                software,
            } => {
                let ours = crate::software().version;
                return Err(match software {
                    Some(s) if code == "version" => AgentError::Version {
                        agent: name,
                        reason: format!(
                            "{reason} (agent runs xferlab {}, this is {ours})",
                            s.version
                        ),
                    },
                    // An order this version cannot read may be one its
                    // version does not know: say which it runs.
                    Some(s) if code == "usage" && s.version != ours => AgentError::Refused {
                        agent: name,
                        code,
                        reason: format!(
                            "{reason} (agent runs xferlab {}, this is {ours})",
                            s.version
                        ),
                    },
                    _ => AgentError::Refused {
                        agent: name,
                        code,
                        reason,
                    },
                });
            }
            ControllerEvent::Version(reason) => {
                return Err(AgentError::Version {
                    agent: name,
                    reason,
                })
            }
            ControllerEvent::Lost { why, lines } => {
                return Err(AgentError::Lost {
                    agent: name,
                    lines,
                    reason: why.to_string(),
                })
            }
            ControllerEvent::Done {
                doc,
                exit_code,
                reason,
            } => {
                return match (doc, exit_code) {
                    (Some(doc), 0) => Ok(Outcome {
                        doc,
                        exit_code,
                        stderr: reason.unwrap_or_default(),
                    }),
                    (doc, code) => Err(AgentError::Failed {
                        agent: name,
                        reason: reason.unwrap_or_else(|| format!("the test exited with {code}")),
                        doc,
                    }),
                };
            }
        }
    }
    Err(AgentError::Lost {
        agent: name,
        lines: m.lines(),
        reason: "the connection ended without a result".into(),
    })
}

fn connect(addrs: &[SocketAddr]) -> Result<TcpStream, String> {
    let mut last = String::from("no address");
    for a in addrs {
        match TcpStream::connect_timeout(a, CONNECT_TIMEOUT) {
            Ok(s) => return Ok(s),
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    Err(last)
}
