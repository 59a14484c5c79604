//! `xferlab usb bulk`: a host-side run over one or two bulk endpoints,
//! reported through the same result type as every transport.

use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use nusb::transfer::{Bulk, In, Out};
use xferlab_core::interval::{FlowMeter, IntervalClock, Reading};
use xferlab_core::result::{
    sum_intervals, CpuUsage, Endpoint as Side, FlowEnd, FlowReport, FlowRole, KernelCounters,
    SideReport, SocketSettings, Status, Summary, TestResult, SCHEMA,
};
use xferlab_core::spec::{
    Direction, FlowDirection, Knobs, Limit, Pattern as TestPattern, TestSpec, Transport,
};
use xferlab_core::units::{format_bytes, RateUnit};
use xferlab_core::usb::descriptor::{EndpointDesc, PipeRequest};
use xferlab_core::usb::errors;
use xferlab_core::usb::stats::{
    ErrorKind, UsbCounters, UsbPipeReport, UsbReport, UsbSample, UsbTotals,
};

use super::cli::{BulkArgs, UsbDir};
use super::device;
use super::engine::{self, LiveCounters, PipeOutcome, PipeSetup, RunControl};
use super::report;
use crate::output::{self, FlowStart, Format, LiveFlow, StartInfo};

/// usbfs caps the memory of all URBs in flight (usbcore.usbfs_memory_mb, 16 MiB by default).
const USBFS_DEFAULT_MB: u64 = 16;

struct Pipe {
    flow_id: u32,
    ep: EndpointDesc,
    live: Arc<LiveCounters>,
    meter: Option<FlowMeter>,
    prev: UsbCounters,
    prev_t: f64,
    samples: Vec<UsbSample>,
    thread: Option<std::thread::JoinHandle<PipeOutcome>>,
}

fn fail(msg: &str, code: u8) -> ExitCode {
    eprintln!("xferlab: {msg}");
    ExitCode::from(code)
}

fn validate(a: &BulkArgs) -> Result<(), String> {
    if a.size == 0 || a.size > 64 << 20 {
        return Err(format!(
            "-l/--size must be 1 byte to 64M per transfer (got {})",
            a.size
        ));
    }
    if a.depth == 0 || a.depth > 4096 {
        return Err(format!(
            "-Q/--depth must be 1 to 4096 transfers in flight (got {})",
            a.depth
        ));
    }
    if let Some(t) = a.time {
        if !(t > 0.0 && t.is_finite()) {
            return Err(format!("-t/--time must be a positive duration (got {t})"));
        }
    }
    if a.bytes == Some(0) {
        return Err("-n/--bytes must be at least 1".into());
    }
    if a.transfer_timeout.is_nan() || a.transfer_timeout <= 0.0 {
        return Err("--transfer-timeout must be positive".into());
    }
    if a.format == Format::Iperf3Json {
        return Err(
            "--format iperf3-json has no shape for USB results; use json, jsonl or csv".into(),
        );
    }
    let dirs = if a.dir == UsbDir::Both { 2 } else { 1 };
    let need = a.size * u64::from(a.depth) * dirs;
    let limit_mb = std::fs::read_to_string("/sys/module/usbcore/parameters/usbfs_memory_mb")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(USBFS_DEFAULT_MB);
    if limit_mb > 0 && need > limit_mb << 20 {
        return Err(format!(
            "-l {} x -Q {} {}= {} in flight, more than usbfs allows ({limit_mb} MiB, \
             /sys/module/usbcore/parameters/usbfs_memory_mb); lower -l or -Q, or raise that limit as root",
            a.size,
            a.depth,
            if dirs == 2 { "x 2 directions " } else { "" },
            format_bytes(need)
        ));
    }
    Ok(())
}

fn open_output(a: &BulkArgs) -> Result<Box<dyn Write + Send>, String> {
    match &a.output {
        Some(path) => std::fs::File::create(path)
            .map(|f| Box::new(io::BufWriter::new(f)) as Box<dyn Write + Send>)
            .map_err(|e| format!("cannot write {}: {e}", path.display())),
        None => Ok(Box::new(io::stdout())),
    }
}

pub fn run(a: &BulkArgs, interrupts: &AtomicU32) -> ExitCode {
    let format = if a.json { Format::Json } else { a.format };
    if let Err(e) = validate(a) {
        return fail(&e, 2);
    }
    let sel = match device::parse_selector(a.device.as_deref()) {
        Ok(s) => s,
        Err(e) => return fail(&e, 2),
    };
    let info = match device::select(&sel, a.serial.as_deref()) {
        Ok(d) => d,
        Err(e) => return fail(&e, 1),
    };
    let req = PipeRequest {
        interface: a.interface,
        ep_in: a.ep_in,
        ep_out: a.ep_out,
    };
    let (dev, _cfg, pipes) = match device::open(&info, req) {
        Ok(x) => x,
        Err(e) => return fail(&e, 1),
    };
    let speed = device::speed_label(info.speed()).unwrap_or("unknown");
    let want_in = a.dir != UsbDir::Out;
    let want_out = a.dir != UsbDir::In;
    let name = device::describe(&info);
    if want_in && pipes.bulk_in.is_none() {
        return fail(&format!("{name} interface {} has no bulk IN endpoint; use --dir out or name one with --ep-in", pipes.interface), 1);
    }
    if want_out && pipes.bulk_out.is_none() {
        return fail(&format!("{name} interface {} has no bulk OUT endpoint; use --dir in or name one with --ep-out", pipes.interface), 1);
    }
    let size = a.size as usize;
    if want_in {
        let ep = pipes.bulk_in.expect("checked");
        if !size.is_multiple_of(usize::from(ep.max_packet.max(1))) {
            return fail(
                &errors::in_size_not_whole_packets(size, ep.address, ep.max_packet.into(), speed),
                2,
            );
        }
    }
    let intf = match device::claim(&info, &dev, &pipes, a.detach_kernel_driver) {
        Ok(i) => i,
        Err(e) => return fail(&e, 1),
    };

    let limit = match (a.time, a.bytes) {
        (_, Some(b)) => Limit::Bytes { bytes: b },
        (Some(t), None) => Limit::Duration { seconds: t },
        (None, None) => Limit::Duration { seconds: 10.0 },
    };
    let spec = TestSpec {
        pattern: TestPattern::Stream,
        transport: Transport::UsbBulk,
        direction: match a.dir {
            UsbDir::In => Direction::Reverse,
            UsbDir::Out => Direction::Forward,
            UsbDir::Both => Direction::Bidir,
        },
        parallel: 1,
        limit,
        omit_s: 0.0,
        interval_s: a.interval,
        knobs: Knobs {
            size: a.size,
            ..Knobs::default()
        },
        title: a.title.clone(),
        rr: None,
        affinity: Default::default(),
    };
    let quota = a.bytes;
    let out = match open_output(a) {
        Ok(o) => o,
        Err(e) => return fail(&e, 2),
    };
    let mut human = if format == Format::Human {
        Some(out)
    } else {
        None
    };
    let mut reporter = if format == Format::Human {
        None
    } else {
        Some(output::reporter(
            format,
            RateUnit::AutoBits,
            open_output(a).unwrap_or_else(|_| Box::new(io::stdout())),
        ))
    };

    let mut eps: Vec<EndpointDesc> = Vec::new();
    if want_out {
        eps.push(pipes.bulk_out.expect("checked"));
    }
    if want_in {
        eps.push(pipes.bulk_in.expect("checked"));
    }
    let clock = IntervalClock::new(a.interval, 0.0);
    let ctl = Arc::new(RunControl::default());
    let cpu_start = super::process_cpu();
    let wall_start = SystemTime::now();
    let start = Instant::now();
    let mut run_pipes: Vec<Pipe> = Vec::new();
    for (i, ep) in eps.iter().enumerate() {
        let setup = PipeSetup {
            address: ep.address,
            max_packet: usize::from(ep.max_packet.max(1)),
            size,
            depth: a.depth as usize,
            quota,
            pattern: a.pattern,
            transfer_timeout: Duration::from_secs_f64(a.transfer_timeout),
            speed,
            sysfs: info.sysfs_path().to_path_buf(),
        };
        let live = Arc::new(LiveCounters::default());
        let (l2, c2) = (live.clone(), ctl.clone());
        let thread = if ep.is_in() {
            let e = match intf.endpoint::<Bulk, In>(ep.address) {
                Ok(e) => e,
                Err(e) => {
                    return fail(
                        &format!("cannot open endpoint 0x{:02x}: {e}", ep.address),
                        1,
                    )
                }
            };
            std::thread::Builder::new()
                .name(format!("usb-in-{:02x}", ep.address))
                .spawn(move || engine::run_pipe(e, true, setup, start, l2, c2))
        } else {
            let e = match intf.endpoint::<Bulk, Out>(ep.address) {
                Ok(e) => e,
                Err(e) => {
                    return fail(
                        &format!("cannot open endpoint 0x{:02x}: {e}", ep.address),
                        1,
                    )
                }
            };
            std::thread::Builder::new()
                .name(format!("usb-out-{:02x}", ep.address))
                .spawn(move || engine::run_pipe(e, false, setup, start, l2, c2))
        };
        let thread = match thread {
            Ok(t) => t,
            Err(e) => return fail(&format!("cannot start a thread: {e}"), 1),
        };
        run_pipes.push(Pipe {
            flow_id: i as u32,
            ep: *ep,
            live,
            meter: Some(FlowMeter::new(clock, Reading::bytes(0))),
            prev: UsbCounters::default(),
            prev_t: 0.0,
            samples: Vec::new(),
            thread: Some(thread),
        });
    }
    let flow_dir = |ep: &EndpointDesc| {
        if ep.is_in() {
            FlowDirection::S2c
        } else {
            FlowDirection::C2s
        }
    };
    let flow_role = |ep: &EndpointDesc| {
        if ep.is_in() {
            FlowRole::Receiver
        } else {
            FlowRole::Sender
        }
    };
    let local_of = |ep: &EndpointDesc| {
        format!(
            "usb {}.{} ep 0x{:02x}",
            info.busnum(),
            info.device_address(),
            ep.address
        )
    };
    let remote = format!(
        "{:04x}:{:04x}{}",
        info.vendor_id(),
        info.product_id(),
        info.product_string()
            .map(|p| format!(" ({p})"))
            .unwrap_or_default()
    );
    let flows_start: Vec<FlowStart> = run_pipes
        .iter()
        .map(|p| FlowStart {
            id: p.flow_id,
            direction: flow_dir(&p.ep),
            role: flow_role(&p.ep),
            local: local_of(&p.ep),
            remote: remote.clone(),
        })
        .collect();
    if let Some(h) = human.as_mut() {
        let limit_txt = match limit {
            Limit::Bytes { bytes } => format!("{} per direction", format_bytes(bytes)),
            Limit::Duration { seconds } => format!("{seconds} s"),
        };
        let _ = writeln!(
            h,
            "Device {name} at {speed} speed{}, interface {}{}",
            info.product_string()
                .map(|p| format!(" \"{p}\""))
                .unwrap_or_default(),
            pipes.interface,
            if pipes.alt != 0 {
                format!(" alt {}", pipes.alt)
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            h,
            "Test: USB bulk {}, {} per transfer, {} in flight{}, {limit_txt}, pattern {}",
            match a.dir {
                UsbDir::In => "IN",
                UsbDir::Out => "OUT",
                UsbDir::Both => "IN+OUT",
            },
            format_bytes(a.size),
            a.depth,
            if a.depth == 1 { " (synchronous)" } else { "" },
            a.pattern
        );
        for p in &run_pipes {
            let _ = writeln!(
                h,
                "[{:>3}] {}  max packet {}",
                p.flow_id + 1,
                report::ep_label(&p.ep),
                p.ep.max_packet
            );
        }
        let _ = writeln!(h, "{}", report::TABLE_HEADER);
        let _ = h.flush();
    }
    if let Some(r) = reporter.as_mut() {
        let session = format!("usb-{}", name.replace([' ', ':', '.'], "-"));
        let _ = r.start(&StartInfo {
            spec: &spec,
            server: &remote,
            embedded: false,
            session: &session,
            flows: &flows_start,
        });
    }

    // Reporting loop: interval boundaries, the time limit, Ctrl-C.
    let deadline = match limit {
        Limit::Duration { seconds } => Some(Duration::from_secs_f64(seconds)),
        Limit::Bytes { .. } => None,
    };
    let mut interrupted = false;
    let mut boundary = clock.next_boundary(0.0);
    loop {
        let all_done = run_pipes
            .iter()
            .all(|p| p.thread.as_ref().is_none_or(|t| t.is_finished()));
        if all_done {
            break;
        }
        let now = start.elapsed();
        if interrupts.load(Relaxed) > 0 && !interrupted {
            interrupted = true;
            ctl.stop.store(true, Relaxed);
        }
        if deadline.is_some_and(|d| now >= d) {
            ctl.stop.store(true, Relaxed);
        }
        let t = now.as_secs_f64();
        if let Some(b) = boundary {
            if t >= b && !ctl.stop.load(Relaxed) {
                let mut live_flows = Vec::new();
                for p in run_pipes.iter_mut() {
                    let c = p.live.read();
                    let meter = p.meter.as_mut().expect("meter until finish");
                    meter.sample(t, b, Reading::bytes(c.bytes));
                    let s = c.sample(&p.prev, p.prev_t, t);
                    p.prev = c;
                    p.prev_t = t;
                    p.samples.push(s);
                    if let Some(iv) = meter.last_interval() {
                        if let Some(h) = human.as_mut() {
                            let _ = writeln!(
                                h,
                                "{}",
                                report::human_row(
                                    p.flow_id + 1,
                                    iv.start_s,
                                    iv.end_s,
                                    iv.bytes,
                                    &s
                                )
                            );
                        }
                        live_flows.push(LiveFlow {
                            id: p.flow_id,
                            direction: flow_dir(&p.ep),
                            role: flow_role(&p.ep),
                            interval: iv.clone(),
                        });
                    }
                }
                if let Some(h) = human.as_mut() {
                    let _ = h.flush();
                }
                if let Some(r) = reporter.as_mut() {
                    let _ = r.interval(&live_flows);
                }
                boundary = clock.next_boundary(t);
            }
        }
        let mut sleep = Duration::from_millis(20);
        if let Some(d) = deadline {
            sleep = sleep.min(d.saturating_sub(now).max(Duration::from_millis(1)));
        }
        std::thread::sleep(sleep);
    }
    ctl.stop.store(true, Relaxed);

    // Collect.
    let wall = start.elapsed().as_secs_f64();
    let mut flows = Vec::new();
    let mut usb_pipes = Vec::new();
    let mut run_errors = Vec::new();
    let mut moved = false;
    for p in run_pipes.iter_mut() {
        let outcome = match p.thread.take().map(|t| t.join()) {
            Some(Ok(o)) => o,
            _ => {
                run_errors.push(format!(
                    "endpoint 0x{:02x}: its thread panicked",
                    p.ep.address
                ));
                continue;
            }
        };
        let c = p.live.read();
        moved |= c.bytes > 0;
        let end_s = if outcome.end_s > 0.0 {
            outcome.end_s
        } else {
            wall
        };
        let meter = p.meter.take().expect("meter");
        let (intervals, total) = meter.finish(end_s, Reading::bytes(c.bytes));
        // The meter either added a last (tail) interval or folded the tail
        // into its last one; the USB samples follow it.
        let tail = c.sample(&p.prev, p.prev_t, end_s.max(p.prev_t));
        let n = p.samples.len();
        if intervals.len() > n {
            p.samples.push(tail);
            if let (Some(h), Some(iv)) = (human.as_mut(), intervals.last()) {
                let _ = writeln!(
                    h,
                    "{}",
                    report::human_row(p.flow_id + 1, iv.start_s, iv.end_s, iv.bytes, &tail)
                );
            }
        } else if let Some(last) = p.samples.last_mut() {
            last.end_s = end_s;
            last.transfers += tail.transfers;
            last.short_transfers += tail.short_transfers;
            last.errors += tail.errors;
            let secs = last.end_s - last.start_s;
            last.transfers_per_second = if secs > 0.0 {
                last.transfers as f64 / secs
            } else {
                0.0
            };
        }
        let end = match &outcome.error {
            Some(e) => FlowEnd::Aborted(e.clone()),
            None => FlowEnd::Completed,
        };
        if let Some(e) = &outcome.error {
            run_errors.push(e.clone());
        }
        if c.error(ErrorKind::Stall) > 0 && outcome.error.is_none() {
            run_errors.push(format!(
                "endpoint 0x{:02x} stalled {} times (each cleared and the run went on): the device halted it, \
                 e.g. a SourceSink sink rejecting data that breaks its pattern (--pattern)",
                p.ep.address,
                c.error(ErrorKind::Stall)
            ));
        }
        if let Some(m) = &outcome.first_mismatch {
            run_errors.push(format!(
                "pattern check failed in {} transfer(s); first: {m}",
                c.pattern_errors
            ));
        }
        let secs = total.end_s - total.start_s;
        let totals = UsbTotals {
            transfers: c.transfers,
            transfers_per_second: if secs > 0.0 {
                c.transfers as f64 / secs
            } else {
                0.0
            },
            short_transfers: c.short,
            errors: c.errors_by_kind(),
            stalls_cleared: c.stalls_cleared,
            pattern_errors: c.pattern_errors,
            latency: report::latency_summary(&outcome.latency_ns),
        };
        usb_pipes.push(UsbPipeReport {
            flow_id: p.flow_id,
            endpoint: p.ep.address,
            max_packet: p.ep.max_packet,
            transfer_size: a.size,
            depth: a.depth,
            pattern: a.pattern,
            intervals: std::mem::take(&mut p.samples),
            total: totals,
        });
        flows.push(FlowReport {
            id: p.flow_id,
            direction: flow_dir(&p.ep),
            role: flow_role(&p.ep),
            local: local_of(&p.ep),
            remote: remote.clone(),
            socket: SocketSettings::default(),
            intervals,
            total,
            end,
        });
    }
    // Release the interface before reporting (nusb ignores errors of a gone device).
    drop(intf);
    if a.detach_kernel_driver {
        // Give the interface back to the driver we took it from (nothing to do if none).
        let _ = dev.attach_kernel_driver(pipes.interface);
    }
    drop(dev);
    let side = SideReport {
        endpoint: Side::Client,
        host: crate::sys::host::host_info(),
        embedded: false,
        duration_s: flows.iter().map(|f| f.total.end_s).fold(0.0, f64::max),
        sums: sum_intervals(&flows),
        flows,
        cpu: {
            let (u, sy) = super::process_cpu();
            CpuUsage::new(u - cpu_start.0, sy - cpu_start.1, wall)
        },
        counters: KernelCounters::default(),
        warnings: Vec::new(),
        usb: Some(UsbReport {
            device: device::info_of(&info),
            interface: pipes.interface,
            alt_setting: pipes.alt,
            pipes: usb_pipes,
        }),
        rr: None,
    };
    let pattern_failed = side
        .usb
        .as_ref()
        .is_some_and(|u| u.pipes.iter().any(|p| p.total.pattern_errors > 0));
    let status = if run_errors.is_empty() && !interrupted {
        Status::Ok
    } else if moved {
        Status::Partial
    } else {
        Status::Failed
    };
    let summary = Summary::from_sides(&side, None);
    let mut id = [0u8; 16];
    let _ = getrandom::fill(&mut id);
    let result = TestResult {
        schema: SCHEMA.into(),
        id: id.iter().map(|b| format!("{b:02x}")).collect(),
        started_at: humantime::format_rfc3339_millis(wall_start).to_string(),
        software: crate::software(),
        spec,
        server_address: format!("usb {name}"),
        client: side,
        server: None,
        summary,
        status,
        errors: run_errors.clone(),
        server_output: None,
        lab: None,
    };
    if let Some(h) = human.as_mut() {
        let _ = report::print_summary(h.as_mut(), &result);
    }
    if let Some(r) = reporter.as_mut() {
        if let Err(e) = r.finish(&result) {
            return fail(&format!("cannot write the result: {e}"), 1);
        }
    }
    for e in &run_errors {
        eprintln!("xferlab: {e}");
    }
    if interrupted {
        ExitCode::from(130)
    } else if status != Status::Ok || pattern_failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
