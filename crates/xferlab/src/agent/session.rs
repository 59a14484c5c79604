//! The agent's side of one order connection, on the session thread the
//! front door starts for it: authenticate (the server's keys, its failed
//! attempt limits), take a session's place (orders count against
//! `--max-sessions` like tests) and one of `--agent-max-orders`, check
//! the order ([`super::order::check`]), run it, stream its lines and
//! send its result. Every order is logged: who asked, the argv, the
//! outcome.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use xferlab_core::outbox::Machine;
use xferlab_core::proto::auth::ServerAuth;
use xferlab_core::proto::order::{AgentEvent, AgentOrder, KEEPALIVE};
use xferlab_core::proto::ProtoError;

use super::order::{check, last_line, run, OrderError, Policy};
use super::wire::{drive, shown, Driven};
use crate::session::auth;
use crate::session::shared::{lock, HandshakeSlot, Shared};
use crate::sys::clock;

/// What a server with `--agent` holds for its orders.
pub struct Agent {
    pub policy: Policy,
    /// Orders running at once (`--agent-max-orders`); more are refused
    /// as busy.
    pub max_orders: usize,
    running: AtomicUsize,
}

impl Agent {
    pub fn new(policy: Policy, max_orders: usize) -> Self {
        Agent {
            policy,
            max_orders,
            running: AtomicUsize::new(0),
        }
    }
}

/// One of the agent's order places, given back when dropped.
struct OrderSlot<'a>(&'a AtomicUsize);

impl Drop for OrderSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How long a write to the controller may block: a controller that stops
/// reading stops its order.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves one order connection (its preamble already read).
pub fn serve(
    mut stream: TcpStream,
    peer: SocketAddr,
    version: u16,
    shared: &Shared,
    handshake: HandshakeSlot,
    agent: &Agent,
) {
    stream.set_nodelay(true).ok();
    stream.set_write_timeout(Some(WRITE_TIMEOUT)).ok();
    crate::net::keepalive(&stream);
    let software = crate::software();
    let Some(keys) = shared.cfg.auth_keys.clone() else {
        // main refuses --agent without --auth-key; kept safe regardless.
        return;
    };
    let nonce = match auth::nonce() {
        Ok(n) => n,
        Err(e) => {
            shared.log(format_args!(
                "{peer}: order refused: no randomness for a challenge: {e}"
            ));
            return;
        }
    };
    let mut m = AgentOrder::new(clock::now(), version, ServerAuth { keys, nonce }, &software);
    // Its counts in /metrics (`xferlab_agent_orders_total`).
    let counted = |result: &'static str, reason: &'static str| {
        shared.metrics.order("controller", result, reason);
    };
    let mut locked_out = false;
    if let Some(wait) = shared
        .auth_failures
        .locked_out(shared.auth_client(peer.ip()))
    {
        locked_out = true;
        counted("refused", "locked_out");
        let why = format!(
            "too many failed authentication attempts from {}; try again in {} s",
            peer.ip(),
            wait.as_secs() + 1
        );
        shared.log_refused(
            peer,
            "locked out",
            format_args!("{peer}: order refused: {why}"),
        );
        m.refuse("auth_failed", &why);
    }
    let (controller, argv) = match drive(&mut stream, &mut m, None) {
        Driven::Event(AgentEvent::Ordered { software, argv }) => (software, argv),
        Driven::Event(AgentEvent::Failed(e)) => {
            let auth = matches!(e, ProtoError::AuthFailed) || m.challenge_unanswered();
            if auth && !locked_out {
                counted("refused", "auth");
                shared.metrics.auth_failed();
            }
            if auth {
                let failures = &shared.auth_failures;
                let n = failures.record(shared.auth_client(peer.ip()));
                shared.log(format_args!(
                    "{peer}: order refused: authentication failed ({})",
                    failures.describe(n)
                ));
            } else {
                shared.log(format_args!("{peer}: order connection ended: {e}"));
            }
            flush(&mut stream, &mut m);
            return;
        }
        _ => {
            flush(&mut stream, &mut m);
            return;
        }
    };
    let what = shown(&argv);
    let refuse = |m: &mut AgentOrder, stream: &mut TcpStream, code: &str, why: &str| {
        m.refuse_order(code, why, &software);
        flush(stream, m);
    };
    // Authenticated: a session's place now, the handshake's back.
    let _slot = match shared.enter(peer.ip()) {
        Ok(s) => s,
        Err(busy) => {
            let why = busy.to_string();
            shared.log_refused(
                peer,
                "busy",
                format_args!("{peer}: order [{what}] refused: {why}"),
            );
            counted("refused", "busy");
            return refuse(&mut m, &mut stream, "busy", &why);
        }
    };
    drop(handshake);
    let _order = if agent.running.fetch_add(1, Ordering::Relaxed) >= agent.max_orders {
        agent.running.fetch_sub(1, Ordering::Relaxed);
        let why = format!(
            "agent busy: {} orders running (its --agent-max-orders limit); try again later",
            agent.max_orders
        );
        shared.log_refused(
            peer,
            "busy",
            format_args!("{peer}: order [{what}] refused: {why}"),
        );
        counted("refused", "busy");
        return refuse(&mut m, &mut stream, "busy", &why);
    } else {
        OrderSlot(&agent.running)
    };
    let checked = match check(&argv, &agent.policy) {
        Ok(c) => c,
        Err(r) => {
            shared.log(format_args!(
                "{peer}: order [{what}] from {} {} refused ({}): {r}",
                controller.name,
                controller.version,
                r.code()
            ));
            counted("refused", r.code());
            return refuse(&mut m, &mut stream, r.code(), &r.to_string());
        }
    };
    shared.log(format_args!(
        "{peer}: order [{what}] from {} {} accepted: {} against {}, as `xferlab {}`",
        controller.name,
        controller.version,
        checked.plan.verb.name(),
        checked.target,
        shown(&checked.argv)
    ));
    m.accept(clock::now(), software.clone());
    // Said now, not with the test's first line: the controller's wait for
    // an answer must not include the test's connect.
    if send(&mut stream, &mut m).is_err() {
        shared.log(format_args!(
            "{peer}: order [{what}] ended: the controller went away"
        ));
        return;
    }
    let Ok(reader) = stream.try_clone() else {
        return;
    };
    let stop = Arc::new(AtomicBool::new(false));
    let link = Arc::new(Mutex::new((m, stream)));
    let watcher = watch(reader, link.clone(), stop.clone());
    let ran = {
        let mut on_line = |line: &str| {
            let mut l = lock(&link);
            let (m, s) = &mut *l;
            m.line(clock::now(), line);
            if send(s, m).is_err() {
                stop.store(true, Ordering::Relaxed);
            }
        };
        run(&checked, &stop, &mut on_line)
    };
    // The test has ended (its child is reaped): its places go back before
    // the controller hears of its end, or the controller's next order,
    // sent the moment this one's result arrives, would find the agent
    // still busy with this one (`xferlab run` across hosts does just that).
    drop(_order);
    drop(_slot);
    let line = {
        let mut l = lock(&link);
        let (m, s) = &mut *l;
        let line = match &ran {
            Ok(o) => {
                let reason = (o.exit_code != 0).then(|| match last_line(&o.stderr) {
                    l if o.stderr.trim().is_empty() => {
                        format!("the test exited with {} ({l})", o.exit_code)
                    }
                    l => l,
                });
                let line = format!(
                    "done: exit {}{}",
                    o.exit_code,
                    reason
                        .as_deref()
                        .map_or(String::new(), |r| format!(" ({r})"))
                );
                m.done(Some(o.doc.clone()), o.exit_code, reason);
                line
            }
            Err(e) => {
                let code = match e {
                    OrderError::NoResult { exit_code, .. } => *exit_code,
                    _ => 1,
                };
                m.done(None, code, Some(e.to_string()));
                format!("failed: {e}")
            }
        };
        send(s, m).ok();
        // Wakes the watcher's read.
        s.shutdown(std::net::Shutdown::Both).ok();
        line
    };
    watcher.join().ok();
    counted(if ran.is_ok() { "served" } else { "failed" }, "");
    shared.log(format_args!("{peer}: order [{what}] {line}"));
}

/// Watches the controller's side of a running order: its end (or any
/// byte: a controller says nothing while its order runs) stops the
/// order; between reads, the machine's keepalive goes out.
fn watch(
    mut reader: TcpStream,
    link: Arc<Mutex<(AgentOrder, TcpStream)>>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        reader.set_read_timeout(Some(KEEPALIVE)).ok();
        let mut buf = [0u8; 256];
        loop {
            match reader.read(&mut buf) {
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    let mut l = lock(&link);
                    let (m, s) = &mut *l;
                    if m.is_closed() {
                        break;
                    }
                    m.handle_timeout(clock::now());
                    if send(s, m).is_err() {
                        stop.store(true, Ordering::Relaxed);
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The end, an error, or bytes it must not send.
                _ => {
                    stop.store(true, Ordering::Relaxed);
                    break;
                }
            }
        }
    })
}

fn send(s: &mut TcpStream, m: &mut AgentOrder) -> io::Result<()> {
    while let Some(b) = m.poll_transmit() {
        s.write_all(&b)?;
    }
    Ok(())
}

/// Sends what is left (a refusal) and closes.
fn flush(s: &mut TcpStream, m: &mut AgentOrder) {
    send(s, m).ok();
    s.shutdown(std::net::Shutdown::Write).ok();
}
