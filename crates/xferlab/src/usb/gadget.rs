//! `xferlab usb gadget`: the device half of a USB bulk test on a machine
//! with a USB device controller (UDC). A configfs gadget carries either
//! xferlab's own source/sink over FunctionFS (IN: writes the pattern, OUT:
//! reads and checks it; synchronous or Linux AIO with a queue of
//! requests), or the kernel's SourceSink function. Everything it creates
//! (configfs directories, the FunctionFS mount) is removed on exit, also
//! after an error or Ctrl-C; `--cleanup` removes what a killed run left.

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xferlab_core::usb::ffs::{self, Event};
use xferlab_core::usb::pattern::Checker;
use xferlab_core::usb::Pattern;

use super::aio;
use super::cli::{parse_vid_pid, GadgetArgs, GadgetFunction, GadgetIo};

const CONFIGFS: &str = "/sys/kernel/config/usb_gadget";

fn fail(msg: &str, code: u8) -> ExitCode {
    eprintln!("xferlab: {msg}");
    ExitCode::from(code)
}

fn write_attr(path: &Path, value: &str) -> Result<(), String> {
    fs::write(path, value).map_err(|e| format!("cannot write `{value}` to {}: {e}", path.display()))
}

fn mkdir(path: &Path) -> Result<(), String> {
    fs::create_dir(path).map_err(|e| format!("cannot create {}: {e}", path.display()))
}

/// The configfs gadget and the FunctionFS mount: created step by step,
/// removed in reverse order on drop.
struct Gadget {
    dir: PathBuf,
    function: String,
    mount: Option<PathBuf>,
    bound: bool,
}

impl Gadget {
    fn func_dir(&self) -> PathBuf {
        self.dir.join("functions").join(&self.function)
    }
    fn link(&self) -> PathBuf {
        self.dir.join("configs/c.1").join(&self.function)
    }
    fn unbind(&mut self) {
        if self.bound {
            let _ = fs::write(self.dir.join("UDC"), "\n");
            self.bound = false;
        }
    }
    /// Everything but the UDC binding and the mount, in reverse order of creation.
    fn remove_dirs(&self) {
        let _ = fs::remove_file(self.link());
        let _ = fs::remove_dir(self.dir.join("configs/c.1/strings/0x409"));
        let _ = fs::remove_dir(self.dir.join("configs/c.1"));
        let _ = fs::remove_dir(self.func_dir());
        let _ = fs::remove_dir(self.dir.join("strings/0x409"));
        let _ = fs::remove_dir(&self.dir);
    }
    fn unmount(&mut self) {
        if let Some(m) = self.mount.take() {
            if let Ok(c) = CString::new(m.as_os_str().as_encoded_bytes()) {
                // SAFETY: a path string; lazy detach so a late fd cannot keep it busy.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
            let _ = fs::remove_dir(&m);
        }
    }
}

impl Drop for Gadget {
    fn drop(&mut self) {
        self.unbind();
        self.unmount();
        self.remove_dirs();
    }
}

fn mount_point(name: &str) -> PathBuf {
    PathBuf::from(format!("/run/xferlab-ffs-{name}"))
}

/// Removes a gadget a killed run left behind.
fn cleanup(name: &str) -> ExitCode {
    let dir = Path::new(CONFIGFS).join(name);
    let mut found = false;
    if dir.exists() {
        found = true;
        let functions: Vec<String> = fs::read_dir(dir.join("functions"))
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let mut g = Gadget {
            dir: dir.clone(),
            function: String::new(),
            mount: None,
            bound: true,
        };
        g.unbind();
        let mp = mount_point(name);
        if mp.exists() {
            g.mount = Some(mp);
            g.unmount();
        }
        for f in functions {
            g.function = f;
            g.remove_dirs();
        }
    } else if mount_point(name).exists() {
        found = true;
        let mut g = Gadget {
            dir,
            function: String::new(),
            mount: Some(mount_point(name)),
            bound: false,
        };
        g.unmount();
    }
    if found {
        println!("removed gadget `{name}`");
    } else {
        println!("no gadget `{name}` to remove");
    }
    ExitCode::SUCCESS
}

fn pick_udc(want: Option<&str>) -> Result<String, String> {
    let udcs: Vec<String> = fs::read_dir("/sys/class/udc")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let none = "no USB device controller in /sys/class/udc: this machine cannot act as a USB device. \
                On a BeagleBone or Raspberry Pi put the OTG port in peripheral mode (dr_mode = \"peripheral\", \
                dtoverlay=dwc2) and load its UDC driver; for a lab without hardware: modprobe dummy_hcd";
    match want {
        Some(w) if udcs.iter().any(|u| u == w) => Ok(w.to_string()),
        Some(w) => Err(format!(
            "no UDC `{w}` (present: {})",
            if udcs.is_empty() {
                "none".into()
            } else {
                udcs.join(", ")
            }
        )),
        None => match udcs.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(none.into()),
            many => Err(format!(
                "several UDCs ({}); pick one with --udc",
                many.join(", ")
            )),
        },
    }
}

fn check_configfs() -> Result<(), String> {
    if Path::new(CONFIGFS).is_dir() {
        return Ok(());
    }
    if Path::new("/sys/kernel/config").is_dir() {
        // configfs not mounted yet (minimal systems): mount it, quietly.
        let (src, target, fstype) = (c"none", c"/sys/kernel/config", c"configfs");
        // SAFETY: valid C strings, no data.
        unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                std::ptr::null(),
            )
        };
    }
    if Path::new(CONFIGFS).is_dir() {
        return Ok(());
    }
    Err(format!(
        "{CONFIGFS} does not exist: load the gadget framework (`modprobe libcomposite`) and mount configfs \
         (`mount -t configfs none /sys/kernel/config`), as root"
    ))
}

/// Max packet size for the speed the UDC reports now.
fn max_packet_for(udc: &str) -> usize {
    let speed =
        fs::read_to_string(format!("/sys/class/udc/{udc}/current_speed")).unwrap_or_default();
    match speed.trim() {
        "super-speed" | "super-speed-plus" => 1024,
        "full-speed" | "low-speed" => 64,
        _ => 512,
    }
}

#[derive(Default)]
struct DirCounters {
    transfers: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    pattern_errors: AtomicU64,
}

struct Shared {
    stop: AtomicBool,
    /// Max packet size while the function is enabled; 0 while it is not.
    max_packet: AtomicUsize,
    enables: AtomicU64,
    input: DirCounters,
    output: DirCounters,
}

pub fn run(a: &GadgetArgs, interrupts: &AtomicU32) -> ExitCode {
    if a.cleanup {
        return cleanup(&a.name);
    }
    if a.size == 0 || a.size > 1 << 20 {
        return fail(
            &format!(
                "-l/--size must be 1 byte to 1M per request (got {})",
                a.size
            ),
            2,
        );
    }
    if a.queue == 0 || a.queue > 256 {
        return fail(
            &format!("--queue must be 1 to 256 requests (got {})", a.queue),
            2,
        );
    }
    if a.name.is_empty() || a.name.contains(['/', '.', ' ']) {
        return fail("--name must be a plain name (no '/', '.' or spaces)", 2);
    }
    let default_id = match a.function {
        GadgetFunction::Ffs => (0x1d6b, 0x0104),
        GadgetFunction::Sourcesink => (0x0525, 0xa4a0),
    };
    let (vid, pid) = match &a.id {
        None => default_id,
        Some(s) => match parse_vid_pid(s) {
            Some(x) => x,
            None => {
                return fail(
                    &format!("--id {s}: VID:PID must be two hex numbers, e.g. 1d6b:0104"),
                    2,
                )
            }
        },
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return fail(
            "setting up a gadget needs root (configfs, mount); run it with sudo",
            1,
        );
    }
    if let Err(e) = check_configfs() {
        return fail(&e, 1);
    }
    let udc = match pick_udc(a.udc.as_deref()) {
        Ok(u) => u,
        Err(e) => return fail(&e, 1),
    };
    let dir = Path::new(CONFIGFS).join(&a.name);
    if dir.exists() {
        return fail(
            &format!(
                "a gadget `{}` already exists ({}): another xferlab gadget runs, or a killed run left it; \
                 remove it with `xferlab usb gadget --cleanup --name {}`",
                a.name,
                dir.display(),
                a.name
            ),
            1,
        );
    }
    let function = match a.function {
        GadgetFunction::Ffs => format!("ffs.{}", a.name),
        GadgetFunction::Sourcesink => "SourceSink.0".to_string(),
    };
    let mut g = Gadget {
        dir: dir.clone(),
        function,
        mount: None,
        bound: false,
    };
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        max_packet: AtomicUsize::new(0),
        enables: AtomicU64::new(0),
        input: DirCounters::default(),
        output: DirCounters::default(),
    });
    let mut threads = Vec::new();
    let setup = (|| -> Result<(), String> {
        mkdir(&dir)
            .map_err(|e| format!("{e}; is libcomposite loaded (`modprobe libcomposite`)?"))?;
        write_attr(&dir.join("idVendor"), &format!("0x{vid:04x}"))?;
        write_attr(&dir.join("idProduct"), &format!("0x{pid:04x}"))?;
        write_attr(&dir.join("bcdUSB"), "0x0200")?;
        mkdir(&dir.join("strings/0x409"))?;
        write_attr(&dir.join("strings/0x409/serialnumber"), &a.serial)?;
        write_attr(&dir.join("strings/0x409/manufacturer"), "xferlab")?;
        let product = match a.function {
            GadgetFunction::Ffs => "xferlab source/sink (FunctionFS)",
            GadgetFunction::Sourcesink => "xferlab Gadget Zero (SourceSink)",
        };
        write_attr(&dir.join("strings/0x409/product"), product)?;
        mkdir(&g.func_dir()).map_err(|e| match a.function {
            GadgetFunction::Ffs => format!(
                "{e}; is FunctionFS available (CONFIG_USB_CONFIGFS_F_FS, `modprobe usb_f_fs`)?"
            ),
            GadgetFunction::Sourcesink => {
                format!("{e}; load the SourceSink function: `modprobe usb_f_ss_lb`")
            }
        })?;
        mkdir(&dir.join("configs/c.1"))?;
        mkdir(&dir.join("configs/c.1/strings/0x409"))?;
        write_attr(
            &dir.join("configs/c.1/strings/0x409/configuration"),
            "xferlab",
        )?;
        write_attr(&dir.join("configs/c.1/MaxPower"), "100")?;
        match a.function {
            GadgetFunction::Sourcesink => {
                let f = g.func_dir();
                write_attr(
                    &f.join("pattern"),
                    &a.pattern.sourcesink_number().to_string(),
                )?;
                write_attr(&f.join("bulk_buflen"), &a.size.to_string())?;
                write_attr(&f.join("bulk_qlen"), &a.queue.to_string())?;
            }
            GadgetFunction::Ffs => {
                let mp = mount_point(&a.name);
                let _ = fs::create_dir_all(&mp);
                let src = CString::new(a.name.as_str()).expect("checked name");
                let target = CString::new(mp.as_os_str().as_encoded_bytes()).expect("path");
                let fstype = CString::new("functionfs").expect("literal");
                // SAFETY: valid C strings; no mount data.
                let r = unsafe {
                    libc::mount(
                        src.as_ptr(),
                        target.as_ptr(),
                        fstype.as_ptr(),
                        0,
                        std::ptr::null(),
                    )
                };
                if r != 0 {
                    let e = io::Error::last_os_error();
                    let _ = fs::remove_dir(&mp);
                    return Err(format!(
                        "cannot mount FunctionFS `{}` on {}: {e}",
                        a.name,
                        mp.display()
                    ));
                }
                g.mount = Some(mp.clone());
                let mut ep0 = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(mp.join("ep0"))
                    .map_err(|e| format!("cannot open {}/ep0: {e}", mp.display()))?;
                ep0.write_all(&ffs::descriptors(0))
                    .map_err(|e| format!("FunctionFS refused the descriptors: {e}"))?;
                ep0.write_all(&ffs::strings("xferlab source/sink"))
                    .map_err(|e| format!("FunctionFS refused the strings: {e}"))?;
                let open_ep = |n: u32| {
                    OpenOptions::new()
                        .read(true)
                        .write(true)
                        .custom_flags(libc::O_NONBLOCK)
                        .open(mp.join(format!("ep{n}")))
                        .map_err(|e| format!("cannot open {}/ep{n}: {e}", mp.display()))
                };
                let ep_in = open_ep(1)?;
                let ep_out = open_ep(2)?;
                let (s0, u0) = (shared.clone(), udc.clone());
                threads.push(spawn("ffs-ep0", move || ep0_loop(ep0, &s0, &u0))?);
                for (file, is_in) in [(ep_in, true), (ep_out, false)] {
                    let s = shared.clone();
                    let (size, queue, pattern, io) =
                        (a.size as usize, a.queue as usize, a.pattern, a.io);
                    let name = if is_in { "ffs-in" } else { "ffs-out" };
                    threads.push(spawn(name, move || match io {
                        GadgetIo::Sync => sync_loop(file, is_in, size, pattern, &s),
                        GadgetIo::Aio => aio_loop(file, is_in, size, queue, pattern, &s),
                    })?);
                }
            }
        }
        std::os::unix::fs::symlink(g.func_dir(), g.link())
            .map_err(|e| format!("cannot link the function into the configuration: {e}"))?;
        write_attr(&dir.join("UDC"), &udc)
            .map_err(|e| format!("{e}; is the UDC `{udc}` used by another gadget?"))?;
        g.bound = true;
        Ok(())
    })();
    if let Err(e) = setup {
        shared.stop.store(true, Relaxed);
        g.unbind();
        for t in threads {
            let _ = t.join();
        }
        drop(g);
        return fail(&e, 1);
    }
    let t0 = Instant::now();
    let cpu0 = super::process_cpu();
    // With -J stdout carries only the JSON document.
    let say = |msg: String| {
        if a.json {
            eprintln!("{msg}");
        } else {
            println!("{msg}");
        }
    };
    say(format!(
        "gadget `{}` {vid:04x}:{pid:04x} on UDC {udc}: {} {}, {} B requests, queue {}, pattern {}{}",
        a.name,
        match a.function {
            GadgetFunction::Ffs => "FunctionFS source/sink",
            GadgetFunction::Sourcesink => "kernel SourceSink",
        },
        match (a.function, a.io) {
            (GadgetFunction::Sourcesink, _) => "(in kernel)",
            (_, GadgetIo::Sync) => "sync I/O",
            (_, GadgetIo::Aio) => "AIO",
        },
        a.size,
        a.queue,
        a.pattern,
        a.time.map(|t| format!(", for {t} s")).unwrap_or_else(|| ", until Ctrl-C".into())
    ));
    let _ = io::stdout().flush();
    let limit = a.time.map(Duration::from_secs_f64);
    while interrupts.load(Relaxed) == 0 && limit.is_none_or(|l| t0.elapsed() < l) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let secs = t0.elapsed().as_secs_f64();
    // Teardown: stop, unbind (ends every transfer in flight), join, unmount, remove.
    shared.stop.store(true, Relaxed);
    g.unbind();
    let deadline = Instant::now() + Duration::from_secs(5);
    for t in threads {
        while !t.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if t.is_finished() {
            let _ = t.join();
        }
    }
    drop(g);
    let leftover = dir.exists() || mount_point(&a.name).exists();
    let cpu1 = super::process_cpu();
    report(a, &shared, secs, (cpu1.0 - cpu0.0, cpu1.1 - cpu0.1));
    if leftover {
        return fail(&format!("could not remove everything of gadget `{}`; run `xferlab usb gadget --cleanup --name {}`", a.name, a.name), 1);
    }
    if interrupts.load(Relaxed) > 0 {
        ExitCode::from(130)
    } else {
        ExitCode::SUCCESS
    }
}

fn report(a: &GadgetArgs, s: &Shared, secs: f64, cpu: (f64, f64)) {
    let cpu_percent = 100.0 * (cpu.0 + cpu.1) / secs.max(1e-9);
    let dir = |c: &DirCounters| {
        serde_json::json!({
            "transfers": c.transfers.load(Relaxed),
            "bytes": c.bytes.load(Relaxed),
            "errors": c.errors.load(Relaxed),
            "pattern_errors": c.pattern_errors.load(Relaxed),
            "mbytes_per_second": c.bytes.load(Relaxed) as f64 / secs.max(1e-9) / 1e6,
        })
    };
    if a.json {
        let v = serde_json::json!({
            "schema": "xferlab.usb-gadget/1",
            "function": format!("{:?}", a.function).to_lowercase(),
            "io": format!("{:?}", a.io).to_lowercase(),
            "queue": a.queue,
            "size": a.size,
            "pattern": a.pattern,
            "seconds": secs,
            "enabled_times": s.enables.load(Relaxed),
            "cpu": { "user_s": cpu.0, "system_s": cpu.1, "percent": cpu_percent },
            "in": dir(&s.input),
            "out": dir(&s.output),
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else if a.function == GadgetFunction::Ffs {
        for (label, c) in [("IN  (to host)", &s.input), ("OUT (from host)", &s.output)] {
            println!(
                "{label}: {} transfers, {} bytes ({:.2} MB/s over {secs:.1} s), errors {}, pattern errors {}",
                c.transfers.load(Relaxed),
                c.bytes.load(Relaxed),
                c.bytes.load(Relaxed) as f64 / secs.max(1e-9) / 1e6,
                c.errors.load(Relaxed),
                c.pattern_errors.load(Relaxed)
            );
        }
    }
    if !a.json {
        println!(
            "CPU gadget {cpu_percent:.1}% (user {:.2} s, sys {:.2} s)",
            cpu.0, cpu.1
        );
    }
    if a.json {
        eprintln!("gadget `{}` removed", a.name);
    } else {
        println!("gadget `{}` removed", a.name);
    }
}

fn spawn(
    name: &str,
    f: impl FnOnce() + Send + 'static,
) -> Result<std::thread::JoinHandle<()>, String> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map_err(|e| format!("cannot start a thread: {e}"))
}

/// ep0: follows ENABLE/DISABLE (the data threads wait for ENABLE and learn
/// the packet size from it) and stalls every class/vendor request.
fn ep0_loop(mut ep0: File, s: &Shared, udc: &str) {
    let mut buf = [0u8; ffs::EVENT_SIZE * 4];
    while !s.stop.load(Relaxed) {
        let mut pfd = libc::pollfd {
            fd: ep0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, 100) };
        if r <= 0 {
            continue;
        }
        let n = match ep0.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        for ev in ffs::parse_events(&buf[..n]) {
            match ev {
                Event::Enable => {
                    s.max_packet.store(max_packet_for(udc), Relaxed);
                    s.enables.fetch_add(1, Relaxed);
                }
                Event::Disable | Event::Unbind | Event::Suspend => s.max_packet.store(0, Relaxed),
                Event::Resume => s.max_packet.store(max_packet_for(udc), Relaxed),
                Event::Setup { request_type, .. } => {
                    // Stall: an I/O in the direction opposite to the request's.
                    let mut none = [0u8; 0];
                    if request_type & 0x80 != 0 {
                        let _ = ep0.read(&mut none);
                    } else {
                        let _ = ep0.write(&none);
                    }
                }
                _ => {}
            }
        }
    }
}

fn counters(s: &Shared, is_in: bool) -> &DirCounters {
    if is_in {
        &s.input
    } else {
        &s.output
    }
}

/// Waits until the host has enabled the function; the packet size, or None at stop.
fn wait_enabled(s: &Shared) -> Option<usize> {
    loop {
        if s.stop.load(Relaxed) {
            return None;
        }
        let mp = s.max_packet.load(Relaxed);
        if mp > 0 {
            return Some(mp);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn completed(s: &Shared, is_in: bool, checker: &Checker, data: &[u8]) {
    let c = counters(s, is_in);
    c.transfers.fetch_add(1, Relaxed);
    c.bytes.fetch_add(data.len() as u64, Relaxed);
    if !is_in && checker.check(data).is_err() {
        c.pattern_errors.fetch_add(1, Relaxed);
    }
}

/// Synchronous mode: one blocking write() (IN) or read() (OUT) at a time.
fn sync_loop(mut f: File, is_in: bool, size: usize, pattern: Pattern, s: &Shared) {
    let mut buf = vec![0u8; size];
    let mut filled_for = 0;
    let mut checker = Checker::new(pattern, 512);
    while let Some(mp) = wait_enabled(s) {
        if filled_for != mp {
            if is_in {
                pattern.fill(&mut buf, mp);
            }
            checker = Checker::new(pattern, mp);
            filled_for = mp;
        }
        let r = if is_in {
            f.write(&buf)
        } else {
            f.read(&mut buf)
        };
        match r {
            Ok(n) => completed(s, is_in, &checker, &buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                // ESHUTDOWN & co: the host went away or reset; wait for the next ENABLE.
                if !s.stop.load(Relaxed) {
                    counters(s, is_in).errors.fetch_add(1, Relaxed);
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
}

/// AIO mode: `queue` requests in flight, each resubmitted as it completes.
fn aio_loop(f: File, is_in: bool, size: usize, queue: usize, pattern: Pattern, s: &Shared) {
    let Ok(ctx) = aio::Context::new(queue as u32) else {
        counters(s, is_in).errors.fetch_add(1, Relaxed);
        return;
    };
    let mut bufs: Vec<Vec<u8>> = (0..queue).map(|_| vec![0u8; size]).collect();
    let mut cbs: Vec<aio::Iocb> = vec![aio::Iocb::default(); queue];
    let mut in_flight = vec![false; queue];
    let mut events = vec![aio::IoEvent::default(); queue];
    let op = if is_in {
        aio::CMD_PWRITE
    } else {
        aio::CMD_PREAD
    };
    let mut mp = 0;
    let mut checker = Checker::new(pattern, 512);
    'outer: while !s.stop.load(Relaxed) {
        let Some(now_mp) = wait_enabled(s) else { break };
        if now_mp != mp {
            if is_in {
                for b in bufs.iter_mut() {
                    pattern.fill(b, now_mp);
                }
            }
            checker = Checker::new(pattern, now_mp);
        }
        mp = now_mp;
        for i in 0..queue {
            if in_flight[i] {
                continue;
            }
            cbs[i] = aio::iocb(f.as_raw_fd(), op, &mut bufs[i], i as u64);
            match ctx.submit(&mut cbs[i]) {
                Ok(()) => in_flight[i] = true,
                Err(_) => {
                    // EAGAIN (not enabled yet) or ESHUTDOWN: back to waiting.
                    std::thread::sleep(Duration::from_millis(10));
                    continue 'outer;
                }
            }
        }
        let n = match ctx.get_events(&mut events, Duration::from_millis(100)) {
            Ok(n) => n,
            Err(_) => break,
        };
        for ev in &events[..n] {
            let i = ev.data as usize;
            if i >= queue {
                continue;
            }
            in_flight[i] = false;
            if ev.res >= 0 {
                let len = (ev.res as usize).min(size);
                completed(s, is_in, &checker, &bufs[i][..len]);
            } else if !s.stop.load(Relaxed) {
                counters(s, is_in).errors.fetch_add(1, Relaxed);
            }
        }
    }
    // Dropping the context cancels and waits for whatever is still in
    // flight (the UDC is unbound by now, so that is quick); only then may
    // the buffers go.
    drop(ctx);
    drop(bufs);
}
