//! One trial on the driver loop ([`drive_alone`]): the host application
//! runs on a thread per endpoint, START goes out over ep0, and the loop
//! keeps the trial's time and Ctrl-C. At the stop the workload sends STOP
//! (the device's report: overruns, underruns, its stream time) before it
//! tells the threads to stop, so the host keeps moving data until the
//! device's sample clock has stopped; then the trial is judged.
//!
//! STOP blocks the loop's thread for up to 5 s (ep0's timeout). A trial
//! has no peer and no intervals to report, so nothing waits on the loop
//! meanwhile.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use nusb::transfer::{Bulk, EndpointDirection, In, Out, TransferError};
use nusb::Endpoint;
use xferlab_core::datagram::RateSearch;
use xferlab_core::result::{CpuUsage, Endpoint as Side, KernelCounters, PatternReport, SideReport};
use xferlab_core::time::Time;
use xferlab_core::usb::cbr::report::{CbrTrial, PerDirection};
use xferlab_core::usb::cbr::wire::{self, StartParams, Status};
use xferlab_core::usb::cbr::{CbrCriterion, CbrOutcome};

use super::ep0::{Endpoints, Ep0};
use super::report;
use super::stream::{self, App, HostCounts};
use crate::driver::client::drive_alone;
use crate::driver::{Finished, Interrupts, Workload, DRAIN};
use crate::output::{Quiet, Reporter};
use crate::sys::clock;
use crate::usb::Fail;

/// A trial's outcome for the run.
pub struct Ran {
    /// None: Ctrl-C came before the trial started.
    pub trial: Option<CbrTrial>,
    /// Ctrl-C ended the trial (or came before it).
    pub interrupted: bool,
}

/// Runs one trial at `rate` bytes/s per direction for `seconds` and
/// judges it with `search`. The endpoints go to the trial's threads and
/// come back at its end.
pub fn run(
    ep0: &Ep0,
    eps: &mut Endpoints,
    app: App,
    params: StartParams,
    seconds: f64,
    search: &mut RateSearch<CbrCriterion>,
    interrupts: &Interrupts,
) -> Result<Ran, Fail> {
    let rate = params.rate;
    // An endpoint is gone only when its thread panicked (see `join`).
    if (params.rx && eps.rx.is_none()) || (params.tx && eps.tx.is_none()) {
        return Err(Fail::run(
            "a host stream's thread panicked in the last trial and took its endpoint with it",
        ));
    }
    let (wake, woken) = mpsc::channel();
    let (end_tx, end_rx) = mpsc::channel();
    let mut w = TrialWorkload::start(ep0.clone(), eps, app, &wake, end_tx)?;
    if let Err(e) = ep0.control_out(wire::REQ_START, &params.encode()) {
        w.end();
        if let Ok(end) = end_rx.try_recv() {
            eps.put_back(end);
        }
        return Err(no_answer(ep0, &e));
    }
    w.started = true;
    let driven = drive_alone(
        Box::new(w),
        (clock::now(), Some(Duration::from_secs_f64(seconds))),
        DRAIN,
        &woken,
        &mut Quiet,
        interrupts,
    );
    let interrupted = driven.run.interrupted() || driven.error.is_some();
    // None: the loop never started the trial (Ctrl-C came first); the
    // workload's Drop has stopped the device and the threads.
    let Some(workload) = driven.workload else {
        return Ok(Ran {
            trial: None,
            interrupted: true,
        });
    };
    // The side report only says how long the trial took; a drain that ran
    // out (the loop cut the trial) is worth a line.
    for w in workload.finish().report.warnings {
        tracing::warn!("{ep}: trial at {rate} B/s: {w}", ep = ep0.name);
    }
    let end = end_rx
        .try_recv()
        .expect("finish hands the trial's end back");
    let (rx, tx, status) = eps.put_back(end);
    let status = match status {
        Some(Ok(s)) => s,
        Some(Err(e)) => return Err(no_answer(ep0, &e)),
        None => unreachable!("a started trial's end sends STOP"),
    };
    let status = Status::decode(&status).ok_or_else(|| {
        Fail::run(format!(
            "{}: STOP's answer is too short: run the same xferlab on both sides",
            ep0.name
        ))
    })?;
    let outcome = CbrOutcome {
        rx: status.rx,
        tx: status.tx,
        host_error: rx.iter().chain(tx.iter()).find_map(|c| c.error.clone()),
    };
    let verdict = search.record(rate * 8, &outcome);
    let host = PerDirection {
        rx: rx.as_ref().map(report::host_side),
        tx: tx.as_ref().map(report::host_side),
    };
    Ok(Ran {
        trial: Some(CbrTrial::new(
            rate,
            status.elapsed_ns,
            &outcome,
            host,
            &verdict,
        )),
        interrupted,
    })
}

fn no_answer(ep0: &Ep0, e: &TransferError) -> Fail {
    Fail::run(format!(
        "{}: the fixed-rate device did not answer START/STOP ({e}); is `xferlab usb gadget --function cbr` still running?",
        ep0.name
    ))
}

/// One direction's thread: it gives its endpoint back with what it counted.
type Stream<D> = JoinHandle<(Endpoint<Bulk, D>, HostCounts)>;

/// A trial's host counts (rx, tx) and STOP's answer.
type Returned = (
    Option<HostCounts>,
    Option<HostCounts>,
    Option<Result<Vec<u8>, TransferError>>,
);

/// What a trial's threads and the device ended with.
pub struct TrialEnd {
    /// None for a direction not streamed; an endpoint is None when its
    /// thread panicked.
    rx: Option<(Option<Endpoint<Bulk, In>>, HostCounts)>,
    tx: Option<(Option<Endpoint<Bulk, Out>>, HostCounts)>,
    /// STOP's answer; None when START never went out.
    status: Option<Result<Vec<u8>, TransferError>>,
}

impl Endpoints {
    /// Takes back the endpoints a trial's threads held; the host counts
    /// per direction and STOP's answer.
    fn put_back(&mut self, end: TrialEnd) -> Returned {
        let status = end.status;
        let rx = end.rx.map(|(ep, c)| {
            self.rx = ep;
            c
        });
        let tx = end.tx.map(|(ep, c)| {
            self.tx = ep;
            c
        });
        (rx, tx, status)
    }
}

struct TrialWorkload {
    ep0: Ep0,
    stop: Arc<AtomicBool>,
    rx: Option<Stream<In>>,
    tx: Option<Stream<Out>>,
    /// START went out: the device streams until STOP.
    started: bool,
    /// STOP went out (its answer is in `status` until the end takes it).
    stop_sent: bool,
    status: Option<Result<Vec<u8>, TransferError>>,
    start: Time,
    warnings: Vec<String>,
    /// Where [`Workload::finish`] hands the trial's end; taken by then.
    end: Option<mpsc::Sender<TrialEnd>>,
}

impl TrialWorkload {
    /// Starts the host application on the endpoints `eps` holds (taken
    /// until the end); START is the caller's.
    fn start(
        ep0: Ep0,
        eps: &mut Endpoints,
        app: App,
        wake: &mpsc::Sender<crate::control::Wake>,
        end: mpsc::Sender<TrialEnd>,
    ) -> Result<TrialWorkload, Fail> {
        let stop = Arc::new(AtomicBool::new(false));
        let done = crate::control::flow_done_notifier(wake);
        let mut w = TrialWorkload {
            ep0,
            stop: stop.clone(),
            rx: None,
            tx: None,
            started: false,
            stop_sent: false,
            status: None,
            start: clock::now(),
            warnings: Vec::new(),
            end: Some(end),
        };
        if let Some(ep) = eps.rx.take() {
            w.rx = Some(spawn("xl-cbr-rx", ep, true, app, &stop, &done)?);
        }
        if let Some(ep) = eps.tx.take() {
            match spawn("xl-cbr-tx", ep, false, app, &stop, &done) {
                Ok(t) => w.tx = Some(t),
                Err(e) => {
                    w.end();
                    return Err(e);
                }
            }
        }
        Ok(w)
    }

    /// STOP, once, if START went out; then the threads stop (in this
    /// order, so the host drains the device until its clock has stopped).
    fn stop_device(&mut self) {
        if self.started && !self.stop_sent {
            self.stop_sent = true;
            self.status = Some(self.ep0.control_in(wire::REQ_STOP, wire::STATUS_LEN));
        }
        self.stop.store(true, Relaxed);
    }

    /// Stops everything, joins the threads and hands the end back.
    fn end(&mut self) {
        self.stop_device();
        let end = TrialEnd {
            rx: self.rx.take().map(join),
            tx: self.tx.take().map(join),
            status: self.status.take(),
        };
        if let Some(to) = self.end.take() {
            // The receiver lives until the trial has read the end.
            let _ = to.send(end);
        }
    }
}

fn join<D>(t: Stream<D>) -> (Option<Endpoint<Bulk, D>>, HostCounts) {
    match t.join() {
        Ok((ep, c)) => (Some(ep), c),
        Err(_) => (
            None,
            HostCounts {
                error: Some("the host stream's thread panicked".into()),
                ..HostCounts::default()
            },
        ),
    }
}

fn spawn<D: EndpointDirection + Send + 'static>(
    name: &str,
    mut ep: Endpoint<Bulk, D>,
    is_in: bool,
    app: App,
    stop: &Arc<AtomicBool>,
    done: &Arc<dyn Fn(u32) + Send + Sync>,
) -> Result<Stream<D>, Fail>
where
    Endpoint<Bulk, D>: Send,
{
    let (stop, done) = (stop.clone(), done.clone());
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let c = stream::run(&mut ep, is_in, app, &stop);
            // The loop sees the trial's end at once, not at its next poll.
            done(0);
            (ep, c)
        })
        .map_err(|e| Fail::run(format!("cannot start the host stream's thread: {e}")))
}

impl Workload for TrialWorkload {
    /// A trial reports no intervals: its lines are the trials'.
    fn tick(&mut self, _now: Time, _out: Option<&mut dyn Reporter>) {}

    fn next_tick(&self) -> Option<Time> {
        None
    }

    fn stop(&mut self, _now: Time) {
        self.stop_device();
    }

    fn abort(&mut self, why: &str) {
        self.stop_device();
        self.warnings.push(why.into());
    }

    /// Both threads ended: at the stop, or early on an error (which makes
    /// the loop stop the trial).
    fn all_done(&self) -> bool {
        self.rx.as_ref().is_none_or(|t| t.is_finished())
            && self.tx.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Hands the trial's end to [`run`]; the side report only says how
    /// long the trial took: a trial's figures go into the cbr document,
    /// not into a test result.
    fn finish(mut self: Box<Self>) -> Finished {
        self.end();
        let duration_s = clock::since(self.start).as_secs_f64();
        Finished {
            report: SideReport {
                endpoint: Side::Client,
                host: crate::sys::host::host_info(),
                embedded: false,
                duration_s,
                flows: Vec::new(),
                sums: Vec::new(),
                cpu: CpuUsage::default(),
                counters: KernelCounters::default(),
                warnings: std::mem::take(&mut self.warnings),
                pattern: PatternReport::Stream,
                transport: None,
            },
            errors: Vec::new(),
        }
    }
}

impl Drop for TrialWorkload {
    /// A trial the loop never started (Ctrl-C first) is dropped unfinished:
    /// the device and the threads must still stop.
    fn drop(&mut self) {
        self.stop_device();
    }
}
