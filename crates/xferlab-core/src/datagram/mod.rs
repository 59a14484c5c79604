//! Sans-IO building blocks of the UDP transport: what a datagram carries,
//! how a sender keeps to a rate, how a receiver accounts for what arrives,
//! and how a series of trials finds the highest rate a path sustains.
//!
//! - [`header`](write_header): the 16-byte `[seq][send_ns]` header at the
//!   front of every datagram.
//! - [`Pacer`]: an absolute send schedule for a target bit rate that does
//!   not drift, allows catching up a bounded batch at a time, and counts
//!   datagrams sent late.
//! - [`RecvStats`]: loss, reordering and duplicates from sequence numbers;
//!   RFC 3550 jitter and one-way-delay variation from send times, without
//!   synchronised clocks.
//! - [`RateSearch`], [`Criterion`], [`repeat_summary`]: ladder or bisection
//!   over rates with an explicit pass/fail criterion, repeated, reported as
//!   max / median / min.
//!
//! None of this touches a socket or reads a clock: times are u64
//! nanoseconds passed in by the driver, so everything is tested with
//! virtual time, and nothing allocates per datagram.
//!
//! # How the drivers use them
//!
//! Sender, per wake-up: `n = pacer.due(now)`; if 0, sleep until
//! `pacer.next_due()`. Otherwise stamp `n` buffers with
//! [`write_header`] (`seq` counting from 0, `send_ns` since the flow
//! started), hand them to one `sendmmsg` (or one UDP_SEGMENT send), and
//! report what the kernel took with `pacer.sent(taken, now)`. With no
//! rate, `due` always allows a full batch and `next_due` is None.
//!
//! Receiver, per `recvmmsg` batch: for each datagram, [`read_header`]
//! (a short or foreign datagram is the caller's to count, not a panic),
//! then `stats.on_datagram(seq, send_ns, recv_ns)` with the receive time
//! (the kernel's timestamp when available); after the batch, publish
//! `stats.counters()` for the interval reporter, which calls
//! `take_owd_max` when it closes an interval.
//!
//! Rate search, around whole trials: `while let Some(rate) =
//! search.next_rate()`, run a trial at `rate`, build a [`TrialOutcome`]
//! from both ends' reports and `search.record(rate, &outcome)`; the run's
//! answer is `search.best()`, and the bests of repeated runs go into
//! [`repeat_summary`].

mod header;
mod ladder;
mod pacer;
mod stats;

pub use header::{read_header, write_header, HEADER_LEN};
pub use ladder::{
    repeat_summary, Criterion, Judge, Plan, RateSearch, RepeatSummary, TrialOutcome, Verdict,
};
pub use pacer::{Pacer, DEFAULT_SLACK_NS};
pub use stats::{RecvCounters, RecvStats};
