//! Server side of one control connection.

use std::time::Duration;

use crate::time::Time;

use super::auth::{hex, unhex, verify, ServerAuth};
use super::message::{ClientMsg, ErrorCode, ServerMsg, Welcome};
use super::wire::{decode_json, ConnKind, FrameDecoder, Preamble, QueueFrame, VERSION};
use super::{
    results_frame_limit, ProtoError, FRAMING, HANDSHAKE_TIMEOUT, MAX_SMALL_FRAME, RESULTS_TIMEOUT,
    RUNNING_GRACE,
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
    /// Challenge sent: the hello waits for the client's answer.
    AwaitAuth,
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
    /// The admitted test's results frame limit (both ways).
    results_max: u32,
    /// The admitted test, for the client's results limit once it is over
    /// ([`super::results_frame_limit_done`]).
    admitted: Option<Box<TestSpec>>,
    /// Authentication, when on; the hello frame it covers.
    auth: Option<ServerAuth>,
    hello: Vec<u8>,
    /// How long the admitted test's flows may take to attach.
    attach_wait: Duration,
    ch: Outbox<ServerEvent>,
}

impl ServerControl {
    /// A control connection whose preamble announced `peer_version`.
    pub fn new(now: Time, peer_version: u16, policy: ServerPolicy) -> Self {
        let mut s = ServerControl {
            state: State::AwaitHello,
            policy,
            decoder: FrameDecoder::new(MAX_SMALL_FRAME),
            results_max: MAX_SMALL_FRAME,
            admitted: None,
            auth: None,
            hello: Vec::new(),
            attach_wait: HANDSHAKE_TIMEOUT,
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

    /// Requires the client to prove it holds one of `auth.keys` before
    /// its hello counts (call right after [`ServerControl::new`]).
    pub fn require_auth(&mut self, auth: ServerAuth) {
        self.auth = Some(auth);
    }

    /// A challenge went out and no answer came before the session ended
    /// (closed, timed out): what the server counts as a failed
    /// authentication attempt.
    pub fn challenge_unanswered(&self) -> bool {
        self.state == State::Failed && self.auth.is_some() && !self.hello.is_empty()
    }

    fn handle_frame(&mut self, now: Time, frame: &[u8]) -> Result<(), ProtoError> {
        let msg = decode_client_msg(frame)?;
        match (self.state, msg) {
            (_, ClientMsg::Error { code, message }) => {
                self.fail(ProtoError::Peer { code, message }, false);
            }
            (State::AwaitHello, ClientMsg::Hello { .. }) if self.auth.is_some() => {
                let nonce = self.auth.as_ref().map(|a| a.nonce).expect("checked");
                self.hello = frame.to_vec();
                self.state = State::AwaitAuth;
                self.ch
                    .queue_frame(&ServerMsg::Challenge { nonce: hex(&nonce) });
            }
            (State::AwaitAuth, ClientMsg::Auth { mac }) => {
                let auth = self.auth.take().expect("set while awaiting it");
                let ok = unhex(&mac)
                    .is_some_and(|mac| verify(&auth.keys, &auth.nonce, &self.hello, &mac));
                if !ok {
                    self.fail(ProtoError::AuthFailed, true);
                    return Ok(());
                }
                let hello = std::mem::take(&mut self.hello);
                self.state = State::AwaitHello;
                return self.handle_frame(now, &hello);
            }
            (
                State::AwaitHello,
                ClientMsg::Hello {
                    spec,
                    attach_wait_s,
                    ..
                },
            ) => {
                self.attach_wait = super::attach_wait(attach_wait_s);
                if let Err(why) = self.policy.check(&spec) {
                    let why = why.to_string();
                    self.reject(ErrorCode::InvalidSpec, &why);
                    self.ch
                        .emit(ServerEvent::Failed(ProtoError::Malformed(why)));
                } else {
                    self.results_max = results_frame_limit(&spec, self.policy.max_duration);
                    self.admitted = Some(Box::new(spec.clone()));
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
                self.results_max
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
            self.attach_wait,
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
    ///
    /// The client starts only once it has read our reply on every data
    /// connection, and a reply may wait for retransmissions as long as
    /// the attach wait it asked for: over a lab hop dropping 20 % of
    /// Not-ECT packets, a reply on a connection whose SYN-ACK was resent
    /// (RTO back at 3 s) lost three times in a row arrives 21 s later, so
    /// the watchdog counts that wait too, before the planned length and
    /// the grace. It stays bounded by [`super::MAX_ATTACH_WAIT`].
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
            self.attach_wait + limit + RUNNING_GRACE,
            "waiting for the client to end the test",
        );
    }

    /// Our flows have drained: send our measurements.
    pub fn send_results(&mut self, now: Time, report: &SideReport) {
        if self.state != State::Stopping {
            return;
        }
        self.ch.queue_frame(&ServerMsg::Results {
            report: super::fit_report(report, self.results_max as usize - FRAMING),
        });
        self.state = State::AwaitResults;
        // The client's report may be as large as what the test did, not
        // as what it planned.
        if let Some(spec) = &self.admitted {
            self.results_max = super::results_frame_limit_done(spec, report, self.results_max);
        }
        self.decoder.set_max_len(self.results_max);
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
            State::AwaitHello | State::AwaitAuth => "before saying hello",
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
        ClientMsg::Auth { .. } => "auth",
        ClientMsg::Stop => "stop",
        ClientMsg::Results { .. } => "results",
        ClientMsg::Error { .. } => "error",
    }
}

fn state_name(s: State) -> &'static str {
    match s {
        State::AwaitHello => "waiting for hello",
        State::AwaitAuth => "waiting for the answer to the challenge",
        State::Deciding => "deciding on the request",
        State::AwaitFlows => "waiting for data connections",
        State::Running => "running",
        State::Stopping => "stopping",
        State::AwaitResults => "waiting for results",
        State::Done => "done",
        State::Failed => "failed",
    }
}

/// A client message. A results frame (the only large one) is read
/// straight into its report: no intermediate tree of the whole frame,
/// which serde's tagged enums would build; unknown keys are skipped
/// without being kept.
fn decode_client_msg(frame: &[u8]) -> Result<ClientMsg, ProtoError> {
    #[derive(serde::Deserialize)]
    struct Tag {
        #[serde(rename = "type")]
        kind: String,
    }
    #[derive(serde::Deserialize)]
    struct ResultsFrame {
        report: Box<SideReport>,
    }
    let tag: Tag = decode_json(frame)?;
    if tag.kind == "results" {
        let r: ResultsFrame = decode_json(frame)?;
        return Ok(ClientMsg::Results { report: r.report });
    }
    if frame.len() > MAX_SMALL_FRAME as usize {
        return Err(ProtoError::TooLarge {
            len: frame.len() as u32,
            max: MAX_SMALL_FRAME,
        });
    }
    decode_json(frame)
}
