//! The face every control-protocol state machine shows its driver
//! ([`Machine`]: input, end of input, timeouts in; events, bytes and the
//! next deadline out), and what each keeps besides its state ([`Outbox`]).
//! xferlab's own control protocol and iperf3's, client and server, are
//! driven by one loop through it.

use std::collections::VecDeque;
use std::time::Duration;

use crate::time::Time;

/// A sans-IO protocol machine on one byte stream, as the driver sees it.
/// The driver feeds it the bytes that arrive, the end of the stream and
/// the time, then polls events, bytes to send and the next deadline.
/// Implementors keep an [`Outbox`]; the polling comes with the trait.
pub trait Machine {
    /// What the machine tells its driver (a test was requested, results
    /// arrived, the exchange failed, ...).
    type Event;

    fn outbox(&mut self) -> &mut Outbox<Self::Event>;
    fn outbox_ref(&self) -> &Outbox<Self::Event>;

    /// Bytes from the peer, in order, in pieces of any size.
    fn handle_input(&mut self, now: Time, data: &[u8]);
    /// The peer closed its side (or the connection broke).
    fn handle_eof(&mut self);
    /// Time passed: fails the current step if its deadline is over.
    fn handle_timeout(&mut self, now: Time);
    /// Done or failed: nothing more will be read; flush and close.
    fn is_closed(&self) -> bool;

    fn poll_event(&mut self) -> Option<Self::Event> {
        self.outbox().poll_event()
    }

    /// Bytes to write to the peer, if any.
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.outbox().poll_transmit()
    }

    /// When [`Machine::handle_timeout`] must be called next.
    fn poll_timeout(&self) -> Option<Time> {
        self.outbox_ref().poll_timeout()
    }
}

/// Bytes and events for the driver, and the current step's deadline.
#[derive(Debug)]
pub struct Outbox<E> {
    out: Vec<u8>,
    events: VecDeque<E>,
    deadline: Option<(Time, &'static str)>,
}

#[allow(clippy::new_without_default)]
impl<E> Outbox<E> {
    pub(crate) fn new() -> Self {
        Outbox {
            out: Vec::new(),
            events: VecDeque::new(),
            deadline: None,
        }
    }

    /// Starts with `first` (a preamble) queued for sending.
    pub(crate) fn starting_with(first: &[u8]) -> Self {
        let mut o = Outbox::new();
        o.send(first);
        o
    }

    pub(crate) fn send(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    pub(crate) fn emit(&mut self, e: E) {
        self.events.push_back(e);
    }

    /// The current step must be over `after` from `now`; `what` names it
    /// in the timeout error. A deadline past what `Time` can hold means
    /// none.
    pub(crate) fn wait(&mut self, now: Time, after: Duration, what: &'static str) {
        self.deadline = now.checked_add(after).map(|at| (at, what));
    }

    pub(crate) fn no_deadline(&mut self) {
        self.deadline = None;
    }

    /// The step that ran out of time by `now`, if any.
    pub(crate) fn expired(&self, now: Time) -> Option<&'static str> {
        self.deadline.filter(|d| now >= d.0).map(|d| d.1)
    }

    pub(crate) fn poll_event(&mut self) -> Option<E> {
        self.events.pop_front()
    }

    pub(crate) fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        (!self.out.is_empty()).then(|| std::mem::take(&mut self.out))
    }

    pub(crate) fn poll_timeout(&self) -> Option<Time> {
        self.deadline.map(|d| d.0)
    }
}

/// The control machine of a test without a control connection (USB bulk:
/// the device answers on the data path, and nothing else is said): no
/// bytes in or out, no events, no deadline, never closed. It lets such a
/// test run on the same driver loop, with the same stop, drain and Ctrl-C
/// decisions, as the tests that have a peer.
#[derive(Debug)]
pub struct NoPeer(Outbox<std::convert::Infallible>);

impl NoPeer {
    pub fn new() -> Self {
        NoPeer(Outbox::new())
    }
}

impl Default for NoPeer {
    fn default() -> Self {
        NoPeer::new()
    }
}

impl Machine for NoPeer {
    type Event = std::convert::Infallible;

    fn outbox(&mut self) -> &mut Outbox<Self::Event> {
        &mut self.0
    }

    fn outbox_ref(&self) -> &Outbox<Self::Event> {
        &self.0
    }

    fn handle_input(&mut self, _now: Time, _data: &[u8]) {}

    fn handle_eof(&mut self) {}

    fn handle_timeout(&mut self, _now: Time) {}

    fn is_closed(&self) -> bool {
        false
    }
}
