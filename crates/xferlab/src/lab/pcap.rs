//! A classic pcap file (nanosecond timestamps, LINKTYPE_RAW: packets start
//! at the IP header), written through a large buffer so capturing costs a
//! memcpy per packet, not a system call.

use anyhow::Context;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
const LINKTYPE_RAW: u32 = 101;

pub struct PcapWriter {
    out: BufWriter<File>,
    snaplen: u32,
    pub errors: u64,
}

impl PcapWriter {
    pub fn create(path: &Path, snaplen: u32) -> anyhow::Result<Self> {
        let f = File::create(path).with_context(|| format!("cannot write {}", path.display()))?;
        let mut out = BufWriter::with_capacity(1 << 20, f);
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&MAGIC_NANOS.to_ne_bytes());
        h[4..6].copy_from_slice(&2u16.to_ne_bytes());
        h[6..8].copy_from_slice(&4u16.to_ne_bytes());
        h[16..20].copy_from_slice(&snaplen.to_ne_bytes());
        h[20..24].copy_from_slice(&LINKTYPE_RAW.to_ne_bytes());
        out.write_all(&h)
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(PcapWriter {
            out,
            snaplen,
            errors: 0,
        })
    }

    /// One packet (IP bytes) at `unix_ns` nanoseconds since the epoch.
    pub fn write(&mut self, unix_ns: u64, packet: &[u8]) {
        let caplen = packet.len().min(self.snaplen as usize);
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&((unix_ns / 1_000_000_000) as u32).to_ne_bytes());
        h[4..8].copy_from_slice(&((unix_ns % 1_000_000_000) as u32).to_ne_bytes());
        h[8..12].copy_from_slice(&(caplen as u32).to_ne_bytes());
        h[12..16].copy_from_slice(&(packet.len() as u32).to_ne_bytes());
        if self.out.write_all(&h).is_err() || self.out.write_all(&packet[..caplen]).is_err() {
            self.errors += 1;
        }
    }

    pub fn finish(mut self) -> anyhow::Result<()> {
        self.out.flush().context("cannot write the capture")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_header_and_records() {
        let dir = std::env::temp_dir().join(format!("xferlab-pcap-{}", std::process::id()));
        let mut w = PcapWriter::create(&dir, 8).unwrap();
        w.write(1_700_000_000_123_456_789, &[0x45; 20]);
        w.finish().unwrap();
        let b = std::fs::read(&dir).unwrap();
        std::fs::remove_file(&dir).ok();
        assert_eq!(b.len(), 24 + 16 + 8);
        assert_eq!(u32::from_ne_bytes(b[0..4].try_into().unwrap()), MAGIC_NANOS);
        assert_eq!(
            u32::from_ne_bytes(b[28..32].try_into().unwrap()),
            123_456_789
        );
        assert_eq!(u32::from_ne_bytes(b[32..36].try_into().unwrap()), 8);
        assert_eq!(u32::from_ne_bytes(b[36..40].try_into().unwrap()), 20);
    }
}
