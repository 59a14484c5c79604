//! Server side of one control connection.

use std::time::Duration;

use crate::time::Time;

use super::message::{ClientMsg, ErrorCode, ServerMsg, Welcome};
use super::wire::{decode_json, ConnKind, FrameDecoder, Preamble, VERSION};
use super::{
    ProtoError, HANDSHAKE_TIMEOUT, MAX_RESULTS_FRAME, MAX_SMALL_FRAME, RESULTS_LIMIT,
    RESULTS_TIMEOUT, RUNNING_GRACE,
};
use crate::outbox::{Machine, Outbox};
use crate::result::SideReport;
use crate::spec::{SpecError, TestSpec};

/// What a server allows any one test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerPolicy {
    /// Longest test, warm-up included; also the watchdog for byte-limited
    /// tests.
    pub max_duration: Duration,
}

impl ServerPolicy {
    /// Checks a request against [`TestSpec::validate`] and this policy.
    pub fn check(&self, spec: &TestSpec) -> Result<(), PolicyError> {
        spec.validate()?;
        if let Some(planned) = spec.planned_seconds() {
            let max = self.max_duration.as_secs_f64();
            if planned > max {
                return Err(PolicyError::TooLong { max, planned });
            }
        }
        Ok(())
    }
}

/// Why a server refuses a test request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("this server runs tests of at most {max} s (asked for {planned} s incl. warm-up); shorten -t/-O or raise the server's --max-duration")]
    TooLong { max: f64, planned: f64 },
}

#[derive(Debug)]
pub enum ServerEvent {
    /// A well-formed, policy-conforming request: answer with
    /// [`ServerControl::accept`] or [`ServerControl::reject`].
    TestRequested(Box<TestSpec>),
    /// The client ends the test: stop sending, drain, then
    /// [`ServerControl::send_results`].
    StopRequested,
    /// The client's measurements; the exchange is complete.
    PeerResults(Box<SideReport>),
    /// The session is over because of this error (already sent to the peer
    /// where that makes sense).
    Failed(ProtoError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    AwaitHello,
    Deciding,
    AwaitFlows,
    Running,
    Stopping,
    AwaitResults,
    Done,
    Failed,
}

#[derive(Debug)]
pub struct ServerControl {
    state: State,
    policy: ServerPolicy,
    decoder: FrameDecoder,
    ch: Outbox<ServerEvent>,
}

impl ServerControl {
    /// A control connection whose preamble announced `peer_version`.
    pub fn new(now: Time, peer_version: u16, policy: ServerPolicy) -> Self {
        let mut s = ServerControl {
            state: State::AwaitHello,
            policy,
            decoder: FrameDecoder::new(MAX_SMALL_FRAME),
            ch: Outbox::starting_with(&Preamble::new(ConnKind::Control).encode()),
        };
        s.ch.wait(now, HANDSHAKE_TIMEOUT, "waiting for the client's hello");
        if peer_version != VERSION {
            s.fail(
                ProtoError::VersionMismatch {
                    ours: VERSION,
                    theirs: peer_version,
                },
                true,
            );
        }
        s
    }

    fn handle_frame(&mut self, now: Time, frame: &[u8]) -> Result<(), ProtoError> {
        let msg: ClientMsg = decode_json(frame)?;
        match (self.state, msg) {
            (_, ClientMsg::Error { code, message }) => {
                self.fail(ProtoError::Peer { code, message }, false);
            }
            (State::AwaitHello, ClientMsg::Hello { spec, .. }) => {
                if let Err(why) = self.policy.check(&spec) {
                    let why = why.to_string();
                    self.reject(ErrorCode::InvalidSpec, &why);
                    self.ch
                        .emit(ServerEvent::Failed(ProtoError::Malformed(why)));
                } else {
                    self.state = State::Deciding;
                    self.ch.no_deadline();
                    self.ch.emit(ServerEvent::TestRequested(Box::new(spec)));
                }
            }
            (State::AwaitFlows | State::Running, ClientMsg::Stop) => {
                self.state = State::Stopping;
                self.ch
                    .wait(now, RESULTS_TIMEOUT, "draining flows after stop");
                self.ch.emit(ServerEvent::StopRequested);
            }
            (State::AwaitResults, ClientMsg::Results { report }) => {
                self.state = State::Done;
                self.ch.no_deadline();
                self.ch.emit(ServerEvent::PeerResults(report));
            }
            (state, msg) => {
                return Err(ProtoError::Malformed(format!(
                    "unexpected {} message while {}",
                    client_msg_name(&msg),
                    state_name(state)
                )))
            }
        }
        self.decoder
            .set_max_len(if self.state == State::AwaitResults {
                MAX_RESULTS_FRAME
            } else {
                MAX_SMALL_FRAME
            });
        Ok(())
    }

    /// Accept the requested test; the client will now attach its flows.
    pub fn accept(&mut self, now: Time, welcome: Welcome) {
        if self.state != State::Deciding {
            return;
        }
        self.ch.queue_frame(&ServerMsg::Welcome(welcome));
        self.state = State::AwaitFlows;
        self.ch.wait(
            now,
            HANDSHAKE_TIMEOUT,
            "waiting for the client's data connections",
        );
    }

    /// Refuse the request (or abort the session) with a reason for the peer.
    pub fn reject(&mut self, code: ErrorCode, message: &str) {
        if self.is_closed() {
            return;
        }
        self.ch.queue_frame(&ServerMsg::Error {
            code,
            message: message.to_string(),
        });
        self.state = State::Failed;
        self.ch.no_deadline();
    }

    /// Every data connection is attached: tell the client to start.
    /// `planned` is the test's planned length (None for byte limits).
    pub fn flows_attached(&mut self, now: Time, planned: Option<Duration>) {
        if self.state != State::AwaitFlows {
            return;
        }
        self.ch.queue_frame(&ServerMsg::Start);
        self.state = State::Running;
        let limit = planned.map_or(self.policy.max_duration, |p| {
            p.min(self.policy.max_duration)
        });
        self.ch.wait(
            now,
            limit + RUNNING_GRACE,
            "waiting for the client to end the test",
        );
    }

    /// Our flows have drained: send our measurements.
    pub fn send_results(&mut self, now: Time, report: &SideReport) {
        if self.state != State::Stopping {
            return;
        }
        self.ch.queue_frame(&ServerMsg::Results {
            report: super::fit_report(report, RESULTS_LIMIT),
        });
        self.state = State::AwaitResults;
        self.decoder.set_max_len(MAX_RESULTS_FRAME);
        self.ch
            .wait(now, RESULTS_TIMEOUT, "waiting for the client's results");
    }

    fn fail(&mut self, e: ProtoError, tell_peer: bool) {
        if self.is_closed() {
            return;
        }
        if tell_peer {
            self.ch.queue_frame(&ServerMsg::Error {
                code: e.code(),
                message: e.to_string(),
            });
        }
        self.state = State::Failed;
        self.ch.no_deadline();
        self.ch.emit(ServerEvent::Failed(e));
    }

    pub fn is_running(&self) -> bool {
        self.state == State::Running
    }
}

impl Machine for ServerControl {
    type Event = ServerEvent;

    fn outbox(&mut self) -> &mut Outbox<ServerEvent> {
        &mut self.ch
    }

    fn outbox_ref(&self) -> &Outbox<ServerEvent> {
        &self.ch
    }

    fn handle_input(&mut self, now: Time, data: &[u8]) {
        if self.is_closed() {
            return;
        }
        self.decoder.push(data);
        loop {
            match self.decoder.next_frame() {
                Ok(Some(frame)) => {
                    if let Err(e) = self.handle_frame(now, &frame) {
                        self.fail(e, true);
                    }
                }
                Ok(None) => break,
                Err(e) => self.fail(e, true),
            }
            if self.is_closed() {
                break;
            }
        }
    }

    /// The peer closed its end (or the connection broke).
    fn handle_eof(&mut self) {
        let when = match self.state {
            State::Done | State::Failed => return,
            State::AwaitHello => "before saying hello",
            State::AwaitResults => "before sending its results",
            _ => "in the middle of the test",
        };
        self.fail(ProtoError::Closed(when), false);
    }

    fn handle_timeout(&mut self, now: Time) {
        if let Some(what) = self.ch.expired(now) {
            self.fail(ProtoError::Timeout(what), true);
        }
    }

    /// Done or failed: nothing more will be read; flush and close.
    fn is_closed(&self) -> bool {
        matches!(self.state, State::Done | State::Failed)
    }
}

fn client_msg_name(m: &ClientMsg) -> &'static str {
    match m {
        ClientMsg::Hello { .. } => "hello",
        ClientMsg::Stop => "stop",
        ClientMsg::Results { .. } => "results",
        ClientMsg::Error { .. } => "error",
    }
}

fn state_name(s: State) -> &'static str {
    match s {
        State::AwaitHello => "waiting for hello",
        State::Deciding => "deciding on the request",
        State::AwaitFlows => "waiting for data connections",
        State::Running => "running",
        State::Stopping => "stopping",
        State::AwaitResults => "waiting for results",
        State::Done => "done",
        State::Failed => "failed",
    }
}
