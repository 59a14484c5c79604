//! The fixed-rate device's control requests on ep0, as bytes: vendor
//! requests to the interface (`bmRequestType` 0x41 OUT / 0xc1 IN, `wIndex`
//! = interface number), which FunctionFS hands to the gadget as setup
//! events. INFO says the device speaks this protocol, START begins a
//! stream with its parameters, STOP ends it and returns what the device's
//! buffers did. Little-endian, fixed layouts, versioned by INFO.

use super::rate::{Episode, Faults, RateReport, KEPT_EPISODES};

/// IN, [`INFO_LEN`] bytes: `XLCB`, version u16, kept episodes u16.
pub const REQ_INFO: u8 = 0x60;
/// OUT, [`START_LEN`] bytes of [`StartParams`].
pub const REQ_START: u8 = 0x61;
/// IN, [`STATUS_LEN`] bytes of [`Status`]: stops the stream first.
pub const REQ_STOP: u8 = 0x62;

pub const MAGIC: &[u8; 4] = b"XLCB";
/// Largest device buffer a START may ask for, per direction: the device
/// allocates it (in requests) for the trial.
pub const MAX_BUFFER: u64 = 64 << 20;
pub const VERSION: u16 = 1;
pub const INFO_LEN: usize = 8;
pub const START_LEN: usize = 48;
const FAULTS_LEN: usize = 16 + 16 * KEPT_EPISODES;
const REPORT_LEN: usize = 7 * 8 + 2 * FAULTS_LEN;
pub const STATUS_LEN: usize = 16 + 2 * REPORT_LEN;

const RX: u64 = 1;
const TX: u64 = 2;

/// What the host asks the device to do in one trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartParams {
    /// RX: produce into the IN endpoint.
    pub rx: bool,
    /// TX: consume from the OUT endpoint.
    pub tx: bool,
    /// Bytes per second, per direction.
    pub rate: u64,
    /// Bytes per sample.
    pub sample: u64,
    /// The device buffer per direction, bytes.
    pub buffer: u64,
    /// Bytes per device-side USB request (the chunk handed to the UDC).
    pub request: u64,
    /// TX: bytes in the buffer before the sample clock starts.
    pub prefill: u64,
}

/// INFO's answer.
pub fn info() -> [u8; INFO_LEN] {
    let mut b = [0u8; INFO_LEN];
    b[..4].copy_from_slice(MAGIC);
    b[4..6].copy_from_slice(&VERSION.to_le_bytes());
    b[6..8].copy_from_slice(&(KEPT_EPISODES as u16).to_le_bytes());
    b
}

/// INFO's answer checked: Ok(()) if the device speaks this version.
pub fn check_info(b: &[u8]) -> Result<(), String> {
    if b.len() < INFO_LEN || &b[..4] != MAGIC {
        return Err("it does not answer as xferlab's fixed-rate device".into());
    }
    let v = u16::from_le_bytes([b[4], b[5]]);
    if v != VERSION {
        return Err(format!(
            "it speaks fixed-rate protocol version {v}, this xferlab {VERSION}: run the same xferlab on both sides"
        ));
    }
    Ok(())
}

struct W<'a> {
    b: &'a mut [u8],
    at: usize,
}

impl W<'_> {
    fn u64(&mut self, v: u64) {
        self.b[self.at..self.at + 8].copy_from_slice(&v.to_le_bytes());
        self.at += 8;
    }
}

struct R<'a> {
    b: &'a [u8],
    at: usize,
}

impl R<'_> {
    fn u64(&mut self) -> u64 {
        let v = u64::from_le_bytes(self.b[self.at..self.at + 8].try_into().unwrap_or([0; 8]));
        self.at += 8;
        v
    }
}

impl StartParams {
    pub fn encode(&self) -> [u8; START_LEN] {
        let mut b = [0u8; START_LEN];
        let mut w = W { b: &mut b, at: 0 };
        w.u64(if self.rx { RX } else { 0 } | if self.tx { TX } else { 0 });
        for v in [
            self.rate,
            self.sample,
            self.buffer,
            self.request,
            self.prefill,
        ] {
            w.u64(v);
        }
        b
    }

    pub fn decode(b: &[u8]) -> Option<StartParams> {
        if b.len() < START_LEN {
            return None;
        }
        let mut r = R { b, at: 0 };
        let flags = r.u64();
        Some(StartParams {
            rx: flags & RX != 0,
            tx: flags & TX != 0,
            rate: r.u64(),
            sample: r.u64(),
            buffer: r.u64(),
            request: r.u64(),
            prefill: r.u64(),
        })
    }
}

/// STOP's answer: how long the stream ran and each direction's report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    /// ns from START to STOP.
    pub elapsed_ns: u64,
    pub rx: Option<RateReport>,
    pub tx: Option<RateReport>,
}

fn put_faults(w: &mut W<'_>, f: &Faults) {
    w.u64(f.samples);
    w.u64(f.episodes);
    for e in &f.first {
        w.u64(e.start_ns);
        w.u64(e.samples);
    }
}

fn get_faults(r: &mut R<'_>) -> Faults {
    let mut f = Faults {
        samples: r.u64(),
        episodes: r.u64(),
        ..Faults::default()
    };
    for e in f.first.iter_mut() {
        *e = Episode {
            start_ns: r.u64(),
            samples: r.u64(),
        };
    }
    f
}

fn put_report(w: &mut W<'_>, r: &RateReport) {
    w.u64(r.clock_start_ns.unwrap_or(u64::MAX));
    for v in [
        r.samples_due,
        r.sample_bytes,
        r.host_bytes,
        r.fill,
        r.max_fill,
        r.min_fill,
    ] {
        w.u64(v);
    }
    put_faults(w, &r.overruns);
    put_faults(w, &r.underruns);
}

fn get_report(r: &mut R<'_>) -> RateReport {
    let start = r.u64();
    RateReport {
        clock_start_ns: (start != u64::MAX).then_some(start),
        samples_due: r.u64(),
        sample_bytes: r.u64(),
        host_bytes: r.u64(),
        fill: r.u64(),
        max_fill: r.u64(),
        min_fill: r.u64(),
        overruns: get_faults(r),
        underruns: get_faults(r),
    }
}

impl Status {
    pub fn encode(&self) -> [u8; STATUS_LEN] {
        let mut b = [0u8; STATUS_LEN];
        let mut w = W { b: &mut b, at: 0 };
        w.u64(self.rx.map_or(0, |_| RX) | self.tx.map_or(0, |_| TX));
        w.u64(self.elapsed_ns);
        let none = RateReport::default();
        put_report(&mut w, self.rx.as_ref().unwrap_or(&none));
        put_report(&mut w, self.tx.as_ref().unwrap_or(&none));
        b
    }

    pub fn decode(b: &[u8]) -> Option<Status> {
        if b.len() < STATUS_LEN {
            return None;
        }
        let mut r = R { b, at: 0 };
        let flags = r.u64();
        let elapsed_ns = r.u64();
        let rx = get_report(&mut r);
        let tx = get_report(&mut r);
        Some(Status {
            elapsed_ns,
            rx: (flags & RX != 0).then_some(rx),
            tx: (flags & TX != 0).then_some(tx),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usb::cbr::rate::{RateBuffer, Role};

    #[test]
    fn start_and_status_round_trip() {
        let p = StartParams {
            rx: true,
            tx: false,
            rate: 42_600_000,
            sample: 4,
            buffer: 1 << 20,
            request: 16_384,
            prefill: 524_288,
        };
        assert_eq!(StartParams::decode(&p.encode()), Some(p));
        assert_eq!(StartParams::decode(&[0; 8]), None);
        let mut b = RateBuffer::new(Role::Source, 1000, 100, 300).unwrap();
        b.start(0);
        b.advance(900_000_000);
        let s = Status {
            elapsed_ns: 1_000_000_000,
            rx: Some(b.report()),
            tx: None,
        };
        let back = Status::decode(&s.encode()).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.rx.unwrap().overruns.kept()[0].start_ns, 400_000_000);
        assert_eq!(STATUS_LEN, 1_216);
    }

    #[test]
    fn info_names_a_foreign_device_and_a_version_skew() {
        assert_eq!(check_info(&info()), Ok(()));
        assert!(check_info(b"\x12\x01")
            .unwrap_err()
            .contains("does not answer"));
        let mut other = info();
        other[4] = 9;
        assert!(check_info(&other).unwrap_err().contains("version 9"));
    }
}
