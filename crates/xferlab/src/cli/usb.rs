//! `xferlab usb ...`: the command line of the USB transport.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use xferlab_core::units::{parse_seconds, parse_size};
use xferlab_core::usb::Pattern;

use crate::output::Format;
use crate::usb::{
    BulkRequest, CbrDir, CbrRequest, GadgetFunction, GadgetIo, GadgetRequest, GadgetVia,
    LinkRequest, MonRequest, NetRequest, ReportTo, Selection, UsbDir, UsbRequest,
};

#[derive(Debug, Args)]
pub struct UsbArgs {
    #[command(subcommand)]
    pub command: UsbCommand,
}

#[derive(Debug, Subcommand)]
pub enum UsbCommand {
    /// List USB devices (bus, address, VID:PID, speed, driver, bulk endpoints).
    List,
    /// Host side: move data through a device's bulk endpoints (usbfs) and
    /// measure throughput, transfers/s, completion latency and errors.
    Bulk(Box<BulkArgs>),
    /// Device side: set up a configfs gadget on this machine's UDC with a
    /// source/sink function (xferlab's own, over FunctionFS, or the kernel's
    /// SourceSink) and serve until interrupted; tears it down on exit.
    Gadget(Box<GadgetArgs>),
    /// Bus accounting without an analyzer: read usbmon (/dev/usbmonN) and
    /// report one device's bulk traffic per direction and interval: USB
    /// payload bytes, transfers/s, Ethernet frames per transfer (decoded from
    /// --encap) and the share of the high-speed bulk capacity used.
    Mon(Box<MonArgs>),
    /// Host side of fixed-rate streaming, as a radio streams samples: the
    /// device (`xferlab usb gadget --function cbr`) produces (RX) or
    /// consumes (TX) data at an exact rate from a buffer of a given size
    /// and counts overruns and underruns; the host moves it with -l/-Q and
    /// an application read/write size. One rate, or a ladder repeated N
    /// times for the highest rate sustained (max and median).
    Cbr(Box<UsbCbrArgs>),
    /// Host side of xferlab's own USB network link: bridge a TAP device to
    /// a device's bulk IN/OUT pipes in ECM, EEM or NCM framing, up to
    /// --frames-per-transfer frames in one transfer. Works against the
    /// kernel's f_ecm, f_eem and f_ncm gadgets (their host class driver is
    /// detached for the run and rebound at exit).
    Net(Box<NetArgs>),
}

#[derive(Debug, Args)]
pub struct NetArgs {
    /// Device: VID:PID or BUS.ADDR.
    #[arg(short = 'd', long, value_name = "VID:PID|BUS.ADDR")]
    pub device: String,
    /// Framing on the bulk pipes.
    #[arg(long, value_parser = parse_encap)]
    pub encap: xferlab_core::usb::net::Encap,
    /// Transfers in flight per direction (default: as many as hold twice
    /// the bytes Linux's usbnet keeps queued at the device's speed, 2 x 60
    /// x 1518 at high speed: 120 ECM frames, 11 NCM NTBs of 16 KiB).
    #[arg(short = 'Q', long)]
    pub depth: Option<usize>,
    #[command(flatten)]
    pub link: LinkOpts,
    /// Seconds to run (default: until SIGINT/SIGTERM).
    #[arg(short = 't', long = "time", value_parser = parse_seconds)]
    pub time: Option<f64>,
    /// Seconds between interval reports (0 = none).
    #[arg(short = 'i', long, value_parser = parse_seconds, default_value = "1")]
    pub interval: f64,
    /// Output format.
    #[arg(long, value_enum, default_value = "human")]
    pub format: Format,
    /// Shorthand for --format json.
    #[arg(short = 'J', long)]
    pub json: bool,
    /// Write the output to a file.
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// Free-text title stored in the result.
    #[arg(short = 'T', long)]
    pub title: Option<String>,
}

/// The options both ends of xferlab's own USB network link share (`usb
/// net` on the host, `usb gadget --function net` on the device).
#[derive(Debug, Args)]
pub struct LinkOpts {
    /// Ethernet frames per transfer this end sends, at most (ECM: always 1).
    #[arg(short = 'N', long, default_value_t = 1)]
    pub frames_per_transfer: usize,
    /// How long the first frame of a transfer waits for more, microseconds.
    #[arg(long, default_value_t = 100)]
    pub coalesce_us: u64,
    /// Bytes per transfer this end sends, at most: what the receiver's
    /// requests hold (host side, default: EEM 1536, the kernel f_eem's at
    /// MTU 1500; NCM 16384, f_ncm's NTB size; gadget side, default: EEM
    /// 1524, cdc_eem's receive URB at MTU 1500; NCM 16384). Raise it (with
    /// the receiver's MTU) for many full frames.
    #[arg(long, value_parser = parse_size)]
    pub max_transfer: Option<u64>,
    /// EEM: send a real CRC-32 (bmCRC = 1) instead of the sentinel.
    #[arg(long)]
    pub crc: bool,
    /// Name of the TAP device to create (removed at exit, also after SIGKILL).
    #[arg(long, default_value = "xl-usb0")]
    pub tap: String,
}

#[derive(Debug, Args)]
pub struct UsbCbrArgs {
    /// Device: VID:PID or BUS.ADDR (default: the one vendor-specific device).
    #[arg(short = 'd', long, value_name = "VID:PID|BUS.ADDR")]
    pub device: Option<String>,
    /// Only the device with this serial number.
    #[arg(long)]
    pub serial: Option<String>,
    /// Interface number (default: the first with bulk endpoints).
    #[arg(long, value_name = "N")]
    pub interface: Option<u8>,
    /// Detach a kernel driver holding the interface (reattached at exit).
    #[arg(long)]
    pub detach_kernel_driver: bool,
    /// Direction of the stream.
    #[arg(long = "dir", value_enum, default_value = "rx")]
    pub dir: CbrDir,
    /// Bytes per host transfer (RX: a multiple of the max packet).
    #[arg(short = 'l', long = "size", value_parser = parse_size, default_value = "16K")]
    pub size: u64,
    /// Host transfers in flight per direction (host buffer = -l x -Q).
    #[arg(short = 'Q', long, default_value_t = 8)]
    pub depth: u32,
    /// The host buffer per direction instead of -Q: SIZE / -l transfers in
    /// flight (a whole number), as a radio driver sizes its buffer.
    #[arg(long, value_parser = parse_size, value_name = "SIZE", conflicts_with = "depth")]
    pub host_buffer: Option<u64>,
    /// The application's read (RX) / write (TX) size: each transfer's data
    /// is copied to (from) the application in calls of this many bytes
    /// (default: -l).
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub app_size: Option<u64>,
    /// One rate, bytes/s per direction (decimal k/M/G: 16M = 16000000 B/s).
    #[arg(short = 'b', long, value_parser = parse_byte_rate, value_name = "BYTES/S", conflicts_with = "ladder")]
    pub rate: Option<u64>,
    /// Rates to try in ascending order, bytes/s, comma separated (e.g.
    /// 16M,18.3M,21.3M,25.6M,32M,42.6M); a run stops at the first rate not
    /// sustained.
    #[arg(long, value_delimiter = ',', value_parser = parse_byte_rate, value_name = "RATES")]
    pub ladder: Vec<u64>,
    /// Runs of the whole ladder; max, median and min of the highest
    /// sustained rate are reported.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub repeat: u32,
    /// Largest number of overrun samples (RX) a sustained trial may have.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub max_overruns: u64,
    /// Largest number of underrun samples (TX) a sustained trial may have.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub max_underruns: u64,
    /// Seconds per trial.
    #[arg(short = 't', long = "time", value_parser = parse_seconds, default_value = "2")]
    pub time: f64,
    /// The device's buffer per direction (a radio's FIFO).
    #[arg(long, value_parser = parse_size, default_value = "64K", value_name = "SIZE")]
    pub device_buffer: u64,
    /// Bytes per device-side USB request (what the device hands its
    /// controller at a time).
    #[arg(long, value_parser = parse_size, default_value = "16K", value_name = "SIZE")]
    pub device_request: u64,
    /// Bytes per sample (4: 16-bit I and Q).
    #[arg(long, value_parser = parse_size, default_value = "4", value_name = "BYTES")]
    pub sample_size: u64,
    /// TX: bytes the device buffers before its sample clock starts
    /// (default: half the device buffer).
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub prefill: Option<u64>,
    /// Test hook: the host application stops reading/writing for FOR every
    /// EVERY (e.g. 500ms:100ms), to provoke overruns (RX) and underruns (TX).
    #[arg(long, value_name = "EVERY:FOR")]
    pub host_stall: Option<String>,
    /// Output format: human (a line per trial) or json (as -J); csv,
    /// jsonl and iperf3-json have no shape for this report.
    #[arg(long, value_enum, default_value = "human", hide_possible_values = true)]
    pub format: Format,
    /// Print the report as JSON (schema xferlab.cbr/1).
    #[arg(short = 'J', long)]
    pub json: bool,
    /// Write the output to a file.
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
}

/// A rate in bytes per second: `16M`, `18.3M`, `500k`.
pub fn parse_byte_rate(s: &str) -> Result<u64, String> {
    xferlab_core::units::parse_rate(s)
        .ok()
        .filter(|&r| r > 0)
        .ok_or_else(|| {
            format!("'{s}' is not a rate: use bytes per second with an optional k, M or G suffix (decimal: 18.3M = 18300000 B/s)")
        })
}

#[derive(Debug, Args)]
pub struct MonArgs {
    /// Device: VID:PID or BUS.ADDR (its bus's usbmon is read, its address
    /// filters the events).
    #[arg(short = 'd', long, value_name = "VID:PID|BUS.ADDR")]
    pub device: String,
    /// The link's encapsulation, to count Ethernet frames per transfer.
    #[arg(long, value_parser = parse_encap)]
    pub encap: Option<xferlab_core::usb::net::Encap>,
    /// Seconds to record (default: until SIGINT/SIGTERM).
    #[arg(short = 't', long = "time", value_parser = parse_seconds)]
    pub time: Option<f64>,
    /// Seconds between interval samples.
    #[arg(short = 'i', long, value_parser = parse_seconds, default_value = "1")]
    pub interval: f64,
    /// A knob of the link to record with the figures (repeatable), e.g.
    /// --knob mtu=1500 --knob tx_max=16384.
    #[arg(long = "knob", value_name = "NAME=VALUE")]
    pub knobs: Vec<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "human")]
    pub format: Format,
    /// Shorthand for --format json.
    #[arg(short = 'J', long)]
    pub json: bool,
    /// Write the output to a file.
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// Free-text title stored in the result.
    #[arg(short = 'T', long)]
    pub title: Option<String>,
}

fn parse_encap(s: &str) -> Result<xferlab_core::usb::net::Encap, String> {
    xferlab_core::usb::net::Encap::parse(s)
        .ok_or_else(|| format!("`{s}` is no encapsulation: ecm, eem or ncm"))
}

#[derive(Debug, Args)]
pub struct BulkArgs {
    /// Device: VID:PID (hex, e.g. 0525:a4a0) or BUS.ADDR (e.g. 1.2). Default:
    /// the one device with a vendor-specific bulk IN/OUT interface.
    #[arg(short = 'd', long, value_name = "VID:PID|BUS.ADDR")]
    pub device: Option<String>,
    /// Only the device with this serial number.
    #[arg(long)]
    pub serial: Option<String>,
    /// Interface number (default: the first with bulk endpoints).
    #[arg(long, value_name = "N")]
    pub interface: Option<u8>,
    /// Bulk IN endpoint address (e.g. 0x81); default from the descriptors.
    #[arg(long, value_parser = parse_ep, value_name = "ADDR")]
    pub ep_in: Option<u8>,
    /// Bulk OUT endpoint address (e.g. 0x01); default from the descriptors.
    #[arg(long, value_parser = parse_ep, value_name = "ADDR")]
    pub ep_out: Option<u8>,
    /// Detach a kernel driver holding the interface (reattached at exit).
    #[arg(long)]
    pub detach_kernel_driver: bool,
    /// Direction.
    #[arg(long = "dir", value_enum, default_value = "in")]
    pub dir: UsbDir,
    /// Bytes per transfer (IN: a multiple of the endpoint's max packet).
    #[arg(short = 'l', long = "size", value_parser = parse_size, default_value = "16K")]
    pub size: u64,
    /// Transfers in flight per endpoint: 1 = a synchronous loop; N keeps N
    /// queued and resubmits each as it completes.
    #[arg(short = 'Q', long, default_value_t = 8)]
    pub depth: u32,
    /// Seconds to run (default 10).
    #[arg(short = 't', long = "time", value_parser = parse_seconds, conflicts_with = "bytes")]
    pub time: Option<f64>,
    /// Bytes per direction instead of a time.
    #[arg(short = 'n', long, value_parser = parse_size)]
    pub bytes: Option<u64>,
    /// Data pattern, as the kernel's SourceSink: 0/zeros, 1/mod63 (byte i of
    /// each packet = i % 63), 2/none. OUT data is written in it; IN data is
    /// checked against it.
    #[arg(long, default_value = "none", value_parser = str::parse::<Pattern>)]
    pub pattern: Pattern,
    /// A transfer not done after this long means the device stopped
    /// answering: the run ends with what it measured.
    #[arg(long, value_parser = parse_seconds, default_value = "5")]
    pub transfer_timeout: f64,
    /// Seconds between interval reports (0 = none).
    #[arg(short = 'i', long, value_parser = parse_seconds, default_value = "1")]
    pub interval: f64,
    /// Output format.
    #[arg(long, value_enum, default_value = "human")]
    pub format: Format,
    /// Shorthand for --format json.
    #[arg(short = 'J', long)]
    pub json: bool,
    /// Write the output to a file.
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// Free-text title stored in the result.
    #[arg(short = 'T', long)]
    pub title: Option<String>,
}

#[derive(Debug, Args)]
pub struct GadgetArgs {
    /// Which function the gadget carries.
    #[arg(long, value_enum, default_value = "ffs")]
    pub function: GadgetFunction,
    /// FunctionFS I/O mode.
    #[arg(long, value_enum, default_value = "aio")]
    pub io: GadgetIo,
    /// Requests in flight per endpoint (AIO; SourceSink's bulk_qlen; net:
    /// transfers in flight per direction).
    #[arg(long, default_value_t = 8)]
    pub queue: u32,
    /// ECM/EEM/NCM: the function's qmult (request queue multiplier at high
    /// speed; kernel default 5).
    #[arg(long)]
    pub qmult: Option<u32>,
    /// Bytes per request (SourceSink's bulk_buflen; net: each OUT request,
    /// the largest transfer the host may send).
    #[arg(short = 'l', long = "size", value_parser = parse_size, default_value = "16K")]
    pub size: u64,
    /// Data pattern sent on IN and checked on OUT (0/zeros, 1/mod63, 2/none).
    #[arg(long, default_value = "mod63", value_parser = str::parse::<Pattern>)]
    pub pattern: Pattern,
    /// The UDC to bind to (default: the only one in /sys/class/udc).
    #[arg(long)]
    pub udc: Option<String>,
    /// Gadget name under /sys/kernel/config/usb_gadget.
    #[arg(long, default_value = "xferlab")]
    pub name: String,
    /// VID:PID the gadget announces (default 1d6b:0104 for ffs, 0525:a4a0 for
    /// sourcesink, 0525:a4a1 for the network functions).
    #[arg(long, value_name = "VID:PID")]
    pub id: Option<String>,
    /// Serial number string.
    #[arg(long, default_value = "xferlab-0001")]
    pub serial: String,
    /// Serve this long, then tear down (default: until interrupted).
    #[arg(short = 't', long = "time", value_parser = parse_seconds)]
    pub time: Option<f64>,
    /// Seconds between interval reports of the bytes the gadget's own
    /// threads move (0 = none; the kernel's functions have none).
    #[arg(short = 'i', long, value_parser = parse_seconds, default_value = "1")]
    pub interval: f64,
    /// Output format.
    #[arg(long, value_enum, default_value = "human")]
    pub format: Format,
    /// Shorthand for --format json.
    #[arg(short = 'J', long)]
    pub json: bool,
    /// Write the output to a file.
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// Free-text title stored in the result.
    #[arg(short = 'T', long)]
    pub title: Option<String>,
    /// Remove a gadget (and FunctionFS mount) of this --name that a killed
    /// run left behind, then exit.
    #[arg(long)]
    pub cleanup: bool,
    /// --function net: framing on the bulk pipes.
    #[arg(long, value_parser = parse_encap)]
    pub encap: Option<xferlab_core::usb::net::Encap>,
    /// --function net: how the device is made. `functionfs`: a function of
    /// a configfs gadget (EEM as CDC-EEM; ECM and NCM vendor-specific, for
    /// `xferlab usb net`: FunctionFS refuses CDC functional descriptors).
    /// `raw-gadget`: a whole device through /dev/raw-gadget (module
    /// raw_gadget) that announces real CDC ECM, NCM or EEM interfaces, so
    /// the host's cdc_ether, cdc_ncm or cdc_eem drives the other end.
    #[arg(long, value_enum, default_value = "functionfs")]
    pub via: GadgetVia,
    #[command(flatten)]
    pub link: LinkOpts,
}

fn parse_ep(s: &str) -> Result<u8, String> {
    let v = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u8::from_str_radix(h, 16)
    } else {
        s.parse::<u8>()
    };
    v.map_err(|_| format!("`{s}` is not an endpoint address (0x81 for IN 1, 0x01 for OUT 1)"))
}

/// A report's settings from the flags a verb has: `-J` folded into the
/// format (`--format` where the verb has it, else human).
fn report_to(
    format: Format,
    json: bool,
    output: Option<&PathBuf>,
    title: Option<&String>,
) -> ReportTo {
    ReportTo {
        format: if json { Format::Json } else { format },
        output: output.cloned(),
        title: title.cloned(),
    }
}

impl UsbArgs {
    /// The verb as the usb module takes it, in plain values; the usb
    /// module checks them.
    pub fn request(&self) -> UsbRequest {
        match &self.command {
            UsbCommand::List => UsbRequest::List,
            UsbCommand::Bulk(b) => UsbRequest::Bulk(Box::new(b.request())),
            UsbCommand::Cbr(c) => UsbRequest::Cbr(Box::new(c.request())),
            UsbCommand::Gadget(g) if g.cleanup => UsbRequest::GadgetCleanup {
                name: g.name.clone(),
            },
            UsbCommand::Gadget(g) => UsbRequest::Gadget(Box::new(g.request())),
            UsbCommand::Mon(m) => UsbRequest::Mon(Box::new(m.request())),
            UsbCommand::Net(n) => UsbRequest::Net(Box::new(n.request())),
        }
    }
}

impl LinkOpts {
    fn request(&self) -> LinkRequest {
        LinkRequest {
            frames_per_transfer: self.frames_per_transfer,
            coalesce_us: self.coalesce_us,
            max_transfer: self.max_transfer,
            crc: self.crc,
            tap: self.tap.clone(),
        }
    }
}

impl BulkArgs {
    fn request(&self) -> BulkRequest {
        BulkRequest {
            select: Selection {
                device: self.device.clone(),
                serial: self.serial.clone(),
                interface: self.interface,
                detach_kernel_driver: self.detach_kernel_driver,
            },
            ep_in: self.ep_in,
            ep_out: self.ep_out,
            dir: self.dir,
            size: self.size,
            depth: self.depth,
            time: self.time,
            bytes: self.bytes,
            pattern: self.pattern,
            transfer_timeout: self.transfer_timeout,
            interval: self.interval,
            report: report_to(
                self.format,
                self.json,
                self.output.as_ref(),
                self.title.as_ref(),
            ),
        }
    }
}

impl UsbCbrArgs {
    fn request(&self) -> CbrRequest {
        CbrRequest {
            select: Selection {
                device: self.device.clone(),
                serial: self.serial.clone(),
                interface: self.interface,
                detach_kernel_driver: self.detach_kernel_driver,
            },
            dir: self.dir,
            size: self.size,
            depth: self.depth,
            host_buffer: self.host_buffer,
            app_size: self.app_size,
            rate: self.rate,
            ladder: self.ladder.clone(),
            repeat: self.repeat,
            max_overruns: self.max_overruns,
            max_underruns: self.max_underruns,
            time: self.time,
            device_buffer: self.device_buffer,
            device_request: self.device_request,
            sample_size: self.sample_size,
            prefill: self.prefill,
            host_stall: self.host_stall.clone(),
            report: report_to(self.format, self.json, self.output.as_ref(), None),
        }
    }
}

impl GadgetArgs {
    fn request(&self) -> GadgetRequest {
        GadgetRequest {
            function: self.function,
            io: self.io,
            queue: self.queue,
            qmult: self.qmult,
            size: self.size,
            pattern: self.pattern,
            udc: self.udc.clone(),
            name: self.name.clone(),
            id: self.id.clone(),
            serial: self.serial.clone(),
            time: self.time,
            interval: self.interval,
            encap: self.encap,
            via: self.via,
            link: self.link.request(),
            report: report_to(
                self.format,
                self.json,
                self.output.as_ref(),
                self.title.as_ref(),
            ),
        }
    }
}

impl NetArgs {
    fn request(&self) -> NetRequest {
        NetRequest {
            device: self.device.clone(),
            encap: self.encap,
            depth: self.depth,
            link: self.link.request(),
            time: self.time,
            interval: self.interval,
            report: report_to(
                self.format,
                self.json,
                self.output.as_ref(),
                self.title.as_ref(),
            ),
        }
    }
}

impl MonArgs {
    fn request(&self) -> MonRequest {
        MonRequest {
            device: self.device.clone(),
            encap: self.encap,
            time: self.time,
            interval: self.interval,
            knobs: self.knobs.clone(),
            report: report_to(
                self.format,
                self.json,
                self.output.as_ref(),
                self.title.as_ref(),
            ),
        }
    }
}
