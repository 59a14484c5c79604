//! Plumbing around a control connection: a reader thread turns the socket
//! into events on the same channel the flows report to, so each side's
//! event loop waits on one thing with one deadline.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

/// Everything an event loop wakes up for.
pub enum Wake {
    /// Bytes from the peer's control connection.
    Control(Vec<u8>),
    /// The control connection ended (EOF or error).
    ControlClosed,
    /// A flow thread ended.
    FlowDone,
    /// A data connection or UDP flow socket presented this session's
    /// token (server only).
    Attach(u32, crate::net::FlowSocket),
}

/// What a side's flow threads (or a USB endpoint's) call when one of them
/// ends: wakes the event loop that owns `tx`.
pub fn flow_done_notifier(tx: &mpsc::Sender<Wake>) -> Arc<dyn Fn(u32) + Send + Sync> {
    let tx = tx.clone();
    Arc::new(move |_flow| {
        tx.send(Wake::FlowDone).ok();
    })
}

/// Writes to a control connection and owns its reader thread.
pub struct ControlIo {
    stream: TcpStream,
    closing: Arc<AtomicBool>,
    reader: Option<JoinHandle<()>>,
}

/// Writes on the control connection must not block forever on a peer that
/// stopped reading.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a closing side keeps reading so that its last message is not
/// destroyed by a reset (close() with unread input sends RST); also how
/// often the reader looks at the closing flag.
const LINGER: Duration = Duration::from_millis(500);

impl ControlIo {
    pub fn new(stream: TcpStream, tx: mpsc::Sender<Wake>) -> io::Result<Self> {
        stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
        stream.set_read_timeout(Some(LINGER))?;
        let mut rd = stream.try_clone()?;
        let closing = Arc::new(AtomicBool::new(false));
        let closing_rd = closing.clone();
        let reader = std::thread::Builder::new()
            .name("xfer-ctl-rd".into())
            .spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match rd.read(&mut buf) {
                        Ok(n) if n > 0 => {
                            // A closing side still drains, but a peer that keeps
                            // talking does not hold it open.
                            if closing_rd.load(Ordering::Relaxed)
                                || tx.send(Wake::Control(buf[..n].to_vec())).is_err()
                            {
                                return;
                            }
                        }
                        Err(e)
                            if matches!(
                                e.kind(),
                                io::ErrorKind::WouldBlock
                                    | io::ErrorKind::TimedOut
                                    | io::ErrorKind::Interrupted
                            ) =>
                        {
                            if closing_rd.load(Ordering::Relaxed) {
                                return;
                            }
                        }
                        _ => {
                            tx.send(Wake::ControlClosed).ok();
                            return;
                        }
                    }
                }
            })?;
        Ok(ControlIo {
            stream,
            closing,
            reader: Some(reader),
        })
    }

    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }
}

impl Drop for ControlIo {
    fn drop(&mut self) {
        // Half-close, then let the reader drain until the peer closes too,
        // or for at most about LINGER.
        self.stream.shutdown(Shutdown::Write).ok();
        self.closing.store(true, Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            r.join().ok();
        }
    }
}
