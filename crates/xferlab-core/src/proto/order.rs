//! Orders: a controller asks an agent (`xferlab server --agent`) to run an
//! xferlab command line as the client, on a connection of its own kind
//! ([`ConnKind::Order`]) on the server's port. Both ends as sans-IO
//! machines ([`AgentOrder`], [`ControllerOrder`]) over the control
//! protocol's frames:
//!
//! ```text
//! controller                         agent
//! preamble(Order), Order{argv} ->
//!                                 <- preamble(Order), Challenge{nonce}
//! Auth{mac}                    ->
//!                                 <- Accepted | Refused{code, reason}
//!                                 <- Line{text}... (each JSON line of the
//!                                    child's output; Keepalive when silent)
//!                                 <- Done{doc, exit_code, reason}
//! ```
//!
//! Every order is authenticated (an agent without keys does not start):
//! the MAC is [`super::auth`]'s, over the nonce and the exact order frame,
//! so the argv that runs is the argv the key holder sent. A controller
//! that closes its connection stops the order.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::auth::{answer, hex, unhex, verify, ServerAuth};
use super::wire::{
    decode_json, ConnKind, FrameDecoder, Preamble, QueueFrame, PREAMBLE_LEN, VERSION,
};
use super::{ProtoError, HANDSHAKE_TIMEOUT, MAX_RESULTS_FRAME, MAX_SMALL_FRAME};
use crate::outbox::{Machine, Outbox};
use crate::result::Software;
use crate::time::Time;

/// How often a running order's agent says it is alive when its test
/// writes nothing (a test with `-i 0`, a long cbr step).
pub const KEEPALIVE: Duration = Duration::from_secs(5);
/// How long a controller waits for anything from a running order before
/// taking its agent for lost: a few missed keepalives.
pub const SILENCE: Duration = Duration::from_secs(20);

/// Controller -> agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControllerMsg {
    /// What to run: an xferlab command line without the program name.
    Order {
        software: Software,
        argv: Vec<String>,
    },
    /// HMAC over the challenge's nonce and the order frame.
    Auth { mac: String },
}

/// Agent -> controller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentMsg {
    Challenge {
        nonce: String,
    },
    /// The order runs.
    Accepted {
        software: Software,
    },
    /// The order does not run (`code`: a short name, e.g. `target`,
    /// `budget`, `auth`, `busy`, `version`, `not_agent`).
    Refused {
        code: String,
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        software: Option<Software>,
    },
    /// One line of the test's output (a JSON line).
    Line {
        text: String,
    },
    /// Nothing to say, still running.
    Keepalive,
    /// The order is over: its result document (None when there is none)
    /// and the test's exit status; `reason` says why it failed.
    Done {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        doc: Option<serde_json::Value>,
        exit_code: i32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

/// What an agent's order machine tells its driver.
#[derive(Debug, PartialEq)]
pub enum AgentEvent {
    /// An authenticated order: check it, then [`AgentOrder::accept`] or
    /// [`AgentOrder::refuse`].
    Ordered {
        software: Software,
        argv: Vec<String>,
    },
    /// The controller went away (or broke the protocol) while the order
    /// ran: stop it.
    Gone(ProtoError),
    /// The exchange failed before an order was accepted.
    Failed(ProtoError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AgentState {
    AwaitOrder,
    AwaitAuth,
    Deciding,
    Running,
    Closed,
}

/// The agent's end of one order connection (its preamble already read).
#[derive(Debug)]
pub struct AgentOrder {
    state: AgentState,
    auth: ServerAuth,
    decoder: FrameDecoder,
    order: Vec<u8>,
    ch: Outbox<AgentEvent>,
}

impl AgentOrder {
    /// A connection whose preamble said `peer_version`; orders are taken
    /// from holders of `auth.keys` only.
    pub fn new(now: Time, peer_version: u16, auth: ServerAuth, software: &Software) -> Self {
        let mut s = AgentOrder {
            state: AgentState::AwaitOrder,
            auth,
            decoder: FrameDecoder::new(MAX_SMALL_FRAME),
            order: Vec::new(),
            ch: Outbox::starting_with(&Preamble::new(ConnKind::Order).encode()),
        };
        s.ch.wait(now, HANDSHAKE_TIMEOUT, "waiting for the order");
        if peer_version != VERSION {
            let e = ProtoError::VersionMismatch {
                ours: VERSION,
                theirs: peer_version,
            };
            s.refuse_with("version", &e.to_string(), Some(software));
            s.ch.emit(AgentEvent::Failed(e));
        }
        s
    }

    /// Refuses before anything was read (the agent is busy, locked out
    /// this address): the answer and close.
    pub fn refuse(&mut self, code: &str, reason: &str) {
        self.refuse_with(code, reason, None);
    }

    fn refuse_with(&mut self, code: &str, reason: &str, software: Option<&Software>) {
        if self.state == AgentState::Closed {
            return;
        }
        self.ch.queue_frame(&AgentMsg::Refused {
            code: code.into(),
            reason: reason.into(),
            software: software.cloned(),
        });
        self.state = AgentState::Closed;
        self.ch.no_deadline();
    }

    /// Refuses the order with the agent's software (so a controller of
    /// another version can tell why).
    pub fn refuse_order(&mut self, code: &str, reason: &str, software: &Software) {
        self.refuse_with(code, reason, Some(software));
    }

    /// The order runs; lines and then [`AgentOrder::done`] follow.
    pub fn accept(&mut self, now: Time, software: Software) {
        if self.state != AgentState::Deciding {
            return;
        }
        self.ch.queue_frame(&AgentMsg::Accepted { software });
        self.state = AgentState::Running;
        self.ch.wait(now, KEEPALIVE, "keepalive");
    }

    /// One line of the test's output.
    pub fn line(&mut self, now: Time, text: &str) {
        if self.state != AgentState::Running {
            return;
        }
        self.ch.queue_frame(&AgentMsg::Line { text: text.into() });
        self.ch.wait(now, KEEPALIVE, "keepalive");
    }

    /// The order is over; the connection closes after this frame.
    pub fn done(&mut self, doc: Option<serde_json::Value>, exit_code: i32, reason: Option<String>) {
        if self.state != AgentState::Running {
            return;
        }
        self.ch.queue_frame(&AgentMsg::Done {
            doc,
            exit_code,
            reason,
        });
        self.state = AgentState::Closed;
        self.ch.no_deadline();
    }

    /// Whether the order was accepted and runs.
    pub fn is_running(&self) -> bool {
        self.state == AgentState::Running
    }

    /// A challenge went out and no valid answer came: a failed
    /// authentication attempt.
    pub fn challenge_unanswered(&self) -> bool {
        self.state == AgentState::AwaitAuth
    }

    fn fail(&mut self, e: ProtoError) {
        match self.state {
            AgentState::Closed => return,
            AgentState::Running => self.ch.emit(AgentEvent::Gone(e)),
            _ => {
                self.ch.queue_frame(&AgentMsg::Refused {
                    code: e.code().as_str().into(),
                    reason: e.to_string(),
                    software: None,
                });
                self.ch.emit(AgentEvent::Failed(e));
            }
        }
        self.state = AgentState::Closed;
        self.ch.no_deadline();
    }

    fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtoError> {
        let msg: ControllerMsg = decode_json(frame)?;
        match (self.state, msg) {
            (AgentState::AwaitOrder, ControllerMsg::Order { .. }) => {
                self.order = frame.to_vec();
                self.state = AgentState::AwaitAuth;
                self.ch.queue_frame(&AgentMsg::Challenge {
                    nonce: hex(&self.auth.nonce),
                });
                Ok(())
            }
            (AgentState::AwaitAuth, ControllerMsg::Auth { mac }) => {
                let ok = unhex(&mac).is_some_and(|mac| {
                    verify(&self.auth.keys, &self.auth.nonce, &self.order, &mac)
                });
                if !ok {
                    return Err(ProtoError::AuthFailed);
                }
                let ControllerMsg::Order { software, argv } = decode_json(&self.order)? else {
                    unreachable!("kept only an order")
                };
                self.state = AgentState::Deciding;
                self.ch.no_deadline();
                self.ch.emit(AgentEvent::Ordered { software, argv });
                Ok(())
            }
            (state, msg) => Err(ProtoError::Malformed(format!(
                "unexpected {} message while {}",
                match msg {
                    ControllerMsg::Order { .. } => "order",
                    ControllerMsg::Auth { .. } => "auth",
                },
                match state {
                    AgentState::AwaitOrder => "waiting for the order",
                    AgentState::AwaitAuth => "waiting for the answer to the challenge",
                    AgentState::Deciding => "deciding on the order",
                    AgentState::Running | AgentState::Closed => "running the order",
                }
            ))),
        }
    }
}

impl Machine for AgentOrder {
    type Event = AgentEvent;

    fn outbox(&mut self) -> &mut Outbox<AgentEvent> {
        &mut self.ch
    }

    fn outbox_ref(&self) -> &Outbox<AgentEvent> {
        &self.ch
    }

    fn handle_input(&mut self, _now: Time, data: &[u8]) {
        if self.state == AgentState::Closed {
            return;
        }
        self.decoder.push(data);
        loop {
            match self.decoder.next_frame() {
                Ok(Some(frame)) => {
                    if let Err(e) = self.handle_frame(&frame) {
                        self.fail(e);
                    }
                }
                Ok(None) => break,
                Err(e) => self.fail(e),
            }
            if self.state == AgentState::Closed {
                break;
            }
        }
    }

    fn handle_eof(&mut self) {
        let when = match self.state {
            AgentState::Closed => return,
            AgentState::AwaitOrder | AgentState::AwaitAuth => "before its order was in",
            AgentState::Deciding | AgentState::Running => "while its order ran",
        };
        self.fail(ProtoError::Closed(when));
    }

    /// Before the order: its deadline. While it runs: time for a
    /// keepalive.
    fn handle_timeout(&mut self, now: Time) {
        if self.ch.expired(now).is_none() {
            return;
        }
        if self.state == AgentState::Running {
            self.ch.queue_frame(&AgentMsg::Keepalive);
            self.ch.wait(now, KEEPALIVE, "keepalive");
        } else {
            self.fail(ProtoError::Timeout("waiting for the order"));
        }
    }

    fn is_closed(&self) -> bool {
        self.state == AgentState::Closed
    }
}

/// What a controller's order machine tells its driver.
#[derive(Debug, PartialEq)]
pub enum ControllerEvent {
    Accepted {
        software: Software,
    },
    Line(String),
    Refused {
        code: String,
        reason: String,
        software: Option<Software>,
    },
    Done {
        doc: Option<serde_json::Value>,
        exit_code: i32,
        reason: Option<String>,
    },
    /// The agent answered in another protocol version, or not as an agent.
    Version(String),
    /// The connection ended, broke or fell silent: `lines` lines had come.
    Lost {
        why: ProtoError,
        lines: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ControllerState {
    AwaitPreamble,
    AwaitAnswer,
    Running,
    Closed,
}

/// The controller's end of one order connection.
#[derive(Debug)]
pub struct ControllerOrder {
    state: ControllerState,
    key: Vec<u8>,
    /// The order frame's payload (what the MAC covers).
    order: Vec<u8>,
    preamble: Vec<u8>,
    decoder: FrameDecoder,
    lines: u64,
    ch: Outbox<ControllerEvent>,
    #[cfg(test)]
    sent_first: bool,
}

impl ControllerOrder {
    /// Sends `argv` as an order signed with `key`.
    pub fn new(now: Time, software: Software, argv: Vec<String>, key: Vec<u8>) -> Self {
        let frame = super::wire::encode_frame(&ControllerMsg::Order { software, argv });
        let mut ch = Outbox::starting_with(&Preamble::new(ConnKind::Order).encode());
        ch.send(&frame);
        ch.wait(now, HANDSHAKE_TIMEOUT, "waiting for the agent's answer");
        ControllerOrder {
            state: ControllerState::AwaitPreamble,
            key,
            order: frame[4..].to_vec(),
            preamble: Vec::new(),
            decoder: FrameDecoder::new(MAX_SMALL_FRAME),
            lines: 0,
            ch,
            #[cfg(test)]
            sent_first: false,
        }
    }

    /// Lines received so far.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    fn close(&mut self, e: ControllerEvent) {
        if self.state == ControllerState::Closed {
            return;
        }
        self.state = ControllerState::Closed;
        self.ch.no_deadline();
        self.ch.emit(e);
    }

    fn lost(&mut self, why: ProtoError) {
        let lines = self.lines;
        self.close(ControllerEvent::Lost { why, lines });
    }

    fn handle_frame(&mut self, now: Time, frame: &[u8]) -> Result<(), ProtoError> {
        let msg: AgentMsg = decode_json(frame)?;
        match (self.state, msg) {
            (
                _,
                AgentMsg::Refused {
                    code,
                    reason,
                    software,
                },
            ) => self.close(ControllerEvent::Refused {
                code,
                reason,
                software,
            }),
            (ControllerState::AwaitAnswer, AgentMsg::Challenge { nonce }) => {
                let nonce = unhex(&nonce).ok_or_else(|| {
                    ProtoError::Malformed("the agent's challenge is not hex".into())
                })?;
                let mac = hex(&answer(&self.key, &nonce, &self.order));
                self.ch.queue_frame(&ControllerMsg::Auth { mac });
                self.ch.wait(
                    now,
                    HANDSHAKE_TIMEOUT,
                    "waiting for the agent to accept the order",
                );
            }
            (ControllerState::AwaitAnswer, AgentMsg::Accepted { software }) => {
                self.state = ControllerState::Running;
                // Results can be large; they come in Done.
                self.decoder.set_max_len(MAX_RESULTS_FRAME);
                self.ch
                    .wait(now, SILENCE, "waiting for the agent (it fell silent)");
                self.ch.emit(ControllerEvent::Accepted { software });
            }
            (ControllerState::Running, AgentMsg::Line { text }) => {
                self.lines += 1;
                self.ch
                    .wait(now, SILENCE, "waiting for the agent (it fell silent)");
                self.ch.emit(ControllerEvent::Line(text));
            }
            (ControllerState::Running, AgentMsg::Keepalive) => {
                self.ch
                    .wait(now, SILENCE, "waiting for the agent (it fell silent)");
            }
            (
                ControllerState::Running,
                AgentMsg::Done {
                    doc,
                    exit_code,
                    reason,
                },
            ) => self.close(ControllerEvent::Done {
                doc,
                exit_code,
                reason,
            }),
            (_, msg) => {
                let name = match msg {
                    AgentMsg::Challenge { .. } => "challenge",
                    AgentMsg::Accepted { .. } => "accepted",
                    AgentMsg::Refused { .. } => "refused",
                    AgentMsg::Line { .. } => "line",
                    AgentMsg::Keepalive => "keepalive",
                    AgentMsg::Done { .. } => "done",
                };
                return Err(ProtoError::Malformed(format!(
                    "unexpected {name} message from the agent"
                )));
            }
        }
        Ok(())
    }
}

impl Machine for ControllerOrder {
    type Event = ControllerEvent;

    fn outbox(&mut self) -> &mut Outbox<ControllerEvent> {
        &mut self.ch
    }

    fn outbox_ref(&self) -> &Outbox<ControllerEvent> {
        &self.ch
    }

    fn handle_input(&mut self, now: Time, mut data: &[u8]) {
        if self.state == ControllerState::AwaitPreamble {
            let take = (PREAMBLE_LEN - self.preamble.len()).min(data.len());
            self.preamble.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.preamble.len() < PREAMBLE_LEN {
                return;
            }
            let mut p = [0u8; PREAMBLE_LEN];
            p.copy_from_slice(&self.preamble);
            match Preamble::decode(&p) {
                Ok(Preamble {
                    kind: ConnKind::Order,
                    ..
                }) => self.state = ControllerState::AwaitAnswer,
                // A server that is not an agent answers orders as a
                // control connection, with its version (a mismatch) or a
                // refusal: its frame says which.
                Ok(Preamble {
                    kind: ConnKind::Control,
                    version,
                }) => {
                    return self.close(ControllerEvent::Version(format!(
                        "it answered as an xferlab server of protocol v{version}, not as an agent: run an xferlab with agents (`xferlab server --agent`) there"
                    )))
                }
                Ok(_) | Err(_) => {
                    return self.close(ControllerEvent::Version(
                        "it does not answer as an xferlab agent".into(),
                    ))
                }
            }
        }
        if self.state == ControllerState::Closed {
            return;
        }
        self.decoder.push(data);
        loop {
            match self.decoder.next_frame() {
                Ok(Some(frame)) => {
                    if let Err(e) = self.handle_frame(now, &frame) {
                        self.lost(e);
                    }
                }
                Ok(None) => break,
                Err(e) => self.lost(e),
            }
            if self.state == ControllerState::Closed {
                break;
            }
        }
    }

    fn handle_eof(&mut self) {
        match self.state {
            ControllerState::Closed => {}
            // An xferlab from before agents closes a connection of a kind
            // it does not know without a word.
            ControllerState::AwaitPreamble => self.close(ControllerEvent::Version(
                "it closed the connection without answering: not an xferlab agent, or an xferlab from before agents".into(),
            )),
            ControllerState::AwaitAnswer => self.lost(ProtoError::Closed("before answering the order")),
            ControllerState::Running => self.lost(ProtoError::Closed("while the order ran")),
        }
    }

    fn handle_timeout(&mut self, now: Time) {
        if let Some(what) = self.ch.expired(now) {
            self.lost(ProtoError::Timeout(what));
        }
    }

    fn is_closed(&self) -> bool {
        self.state == ControllerState::Closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::fixtures::software;

    const KEY: &[u8] = b"a key of sixteen+ bytes";

    fn agent(now: Time) -> AgentOrder {
        AgentOrder::new(
            now,
            VERSION,
            ServerAuth {
                keys: std::sync::Arc::new(vec![b"another key, 16+ bytes".to_vec(), KEY.to_vec()]),
                nonce: [9; 32],
            },
            &software("1.0"),
        )
    }

    /// Moves every byte each side has for the other, until neither has
    /// any. The controller's preamble is the front door's to read.
    fn pump(a: &mut AgentOrder, c: &mut ControllerOrder, now: Time) {
        if !c.sent_first {
            c.sent_first = true;
            let b = c.poll_transmit().unwrap();
            assert_eq!(b[..PREAMBLE_LEN], Preamble::new(ConnKind::Order).encode());
            a.handle_input(now, &b[PREAMBLE_LEN..]);
        }
        loop {
            let mut moved = false;
            if let Some(b) = c.poll_transmit() {
                a.handle_input(now, &b);
                moved = true;
            }
            if let Some(b) = a.poll_transmit() {
                c.handle_input(now, &b);
                moved = true;
            }
            if !moved {
                break;
            }
        }
    }

    fn argv() -> Vec<String> {
        vec!["stream".into(), "10.0.0.2".into(), "-t".into(), "1".into()]
    }

    #[test]
    fn an_order_with_the_right_key_runs_and_its_lines_and_result_come_back() {
        let t0 = Time::ZERO;
        let mut a = agent(t0);
        let mut c = ControllerOrder::new(t0, software("1.0"), argv(), KEY.to_vec());
        pump(&mut a, &mut c, t0);
        assert_eq!(
            a.poll_event(),
            Some(AgentEvent::Ordered {
                software: software("1.0"),
                argv: argv()
            })
        );
        a.accept(t0, software("1.0"));
        a.line(t0, "{\"event\":\"interval\"}");
        pump(&mut a, &mut c, t0);
        assert!(matches!(
            c.poll_event(),
            Some(ControllerEvent::Accepted { .. })
        ));
        assert_eq!(
            c.poll_event(),
            Some(ControllerEvent::Line("{\"event\":\"interval\"}".into()))
        );
        // Silent for a while: keepalives keep the controller waiting.
        let mut now = t0;
        for _ in 0..10 {
            now += KEEPALIVE;
            a.handle_timeout(now);
            c.handle_timeout(now);
            pump(&mut a, &mut c, now);
        }
        assert_eq!(c.poll_event(), None);
        a.done(Some(serde_json::json!({"schema": "x"})), 0, None);
        pump(&mut a, &mut c, now);
        assert!(a.is_closed() && c.is_closed());
        assert_eq!(
            c.poll_event(),
            Some(ControllerEvent::Done {
                doc: Some(serde_json::json!({"schema": "x"})),
                exit_code: 0,
                reason: None
            })
        );
    }

    #[test]
    fn a_wrong_key_is_refused_and_nothing_is_ordered() {
        let t0 = Time::ZERO;
        let mut a = agent(t0);
        let mut c = ControllerOrder::new(
            t0,
            software("1.0"),
            argv(),
            b"not the key, 16+ bytes".to_vec(),
        );
        pump(&mut a, &mut c, t0);
        assert!(matches!(
            a.poll_event(),
            Some(AgentEvent::Failed(ProtoError::AuthFailed))
        ));
        assert!(matches!(
            c.poll_event(),
            Some(ControllerEvent::Refused { code, reason, .. })
                if code == "auth_failed" && reason.contains("authentication failed")
        ));
    }

    #[test]
    fn the_mac_covers_the_order() {
        // An answer for one order does not let another run: the agent
        // verifies the frame it was sent, not what the controller meant.
        let t0 = Time::ZERO;
        let mut a = agent(t0);
        let mut c = ControllerOrder::new(t0, software("1.0"), argv(), KEY.to_vec());
        let mut sent = c.poll_transmit().unwrap();
        // Tamper with the argv in flight (same length: "10.0.0.2" -> "10.0.0.3").
        let at = sent.windows(8).position(|w| w == b"10.0.0.2").unwrap();
        sent[at + 7] = b'3';
        a.handle_input(t0, &sent[PREAMBLE_LEN..]);
        c.sent_first = true;
        pump(&mut a, &mut c, t0);
        assert!(matches!(
            a.poll_event(),
            Some(AgentEvent::Failed(ProtoError::AuthFailed))
        ));
    }

    #[test]
    fn a_controller_that_goes_away_stops_the_order() {
        let t0 = Time::ZERO;
        let mut a = agent(t0);
        let mut c = ControllerOrder::new(t0, software("1.0"), argv(), KEY.to_vec());
        pump(&mut a, &mut c, t0);
        a.poll_event();
        a.accept(t0, software("1.0"));
        a.handle_eof();
        assert!(matches!(
            a.poll_event(),
            Some(AgentEvent::Gone(ProtoError::Closed(_)))
        ));
    }

    #[test]
    fn a_lost_or_silent_agent_ends_the_order_with_the_lines_so_far() {
        let t0 = Time::ZERO;
        let mut a = agent(t0);
        let mut c = ControllerOrder::new(t0, software("1.0"), argv(), KEY.to_vec());
        pump(&mut a, &mut c, t0);
        a.poll_event();
        a.accept(t0, software("1.0"));
        a.line(t0, "1");
        a.line(t0, "2");
        pump(&mut a, &mut c, t0);
        c.handle_eof();
        let ev: Vec<_> = std::iter::from_fn(|| c.poll_event()).collect();
        assert!(
            matches!(ev.last(), Some(ControllerEvent::Lost { lines: 2, .. })),
            "{ev:?}"
        );
        // Silent: no keepalive for SILENCE.
        let mut a = agent(t0);
        let mut c = ControllerOrder::new(t0, software("1.0"), argv(), KEY.to_vec());
        pump(&mut a, &mut c, t0);
        a.poll_event();
        a.accept(t0, software("1.0"));
        pump(&mut a, &mut c, t0);
        c.handle_timeout(t0 + SILENCE);
        let ev: Vec<_> = std::iter::from_fn(|| c.poll_event()).collect();
        assert!(
            matches!(
                ev.last(),
                Some(ControllerEvent::Lost {
                    why: ProtoError::Timeout(_),
                    lines: 0
                })
            ),
            "{ev:?}"
        );
    }

    #[test]
    fn other_versions_and_non_agents_are_told_apart() {
        let t0 = Time::ZERO;
        let mut c = ControllerOrder::new(t0, software("1.0"), argv(), KEY.to_vec());
        c.handle_eof();
        assert!(
            matches!(c.poll_event(), Some(ControllerEvent::Version(m)) if m.contains("before agents"))
        );
        let mut c = ControllerOrder::new(t0, software("1.0"), argv(), KEY.to_vec());
        c.handle_input(t0, &Preamble::new(ConnKind::Control).encode());
        assert!(
            matches!(c.poll_event(), Some(ControllerEvent::Version(m)) if m.contains("not as an agent"))
        );
        // An agent of another protocol version refuses with its software.
        let mut a = AgentOrder::new(
            t0,
            VERSION + 1,
            ServerAuth {
                keys: std::sync::Arc::new(vec![KEY.to_vec()]),
                nonce: [1; 32],
            },
            &software("9.9"),
        );
        let mut c = ControllerOrder::new(t0, software("1.0"), argv(), KEY.to_vec());
        pump(&mut a, &mut c, t0);
        assert!(matches!(
            c.poll_event(),
            Some(ControllerEvent::Refused { code, software: Some(s), .. }) if code == "version" && s.version == "9.9"
        ));
    }

    #[test]
    fn an_order_never_answered_times_out_on_both_ends() {
        let t0 = Time::ZERO;
        let mut a = agent(t0);
        a.handle_timeout(t0 + HANDSHAKE_TIMEOUT);
        assert!(matches!(
            a.poll_event(),
            Some(AgentEvent::Failed(ProtoError::Timeout(_)))
        ));
        let mut c = ControllerOrder::new(t0, software("1.0"), argv(), KEY.to_vec());
        c.handle_timeout(t0 + HANDSHAKE_TIMEOUT);
        assert!(matches!(c.poll_event(), Some(ControllerEvent::Lost { .. })));
    }
}
