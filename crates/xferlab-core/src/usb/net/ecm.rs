//! CDC-ECM framing: a transfer is exactly one Ethernet frame, without CRC
//! or header. The receiver learns where a frame ends from the short packet
//! that ends the transfer; a frame whose length is a multiple of the max
//! packet is followed by a zero-length packet instead (cdc_ether and f_ecm
//! both do so), which [`EcmFraming::close`] asks the driver for.

use super::coalesce::Framing;
use super::{Decode, DecodeStats, ETH_HLEN};

#[derive(Debug, Clone)]
pub struct EcmFraming {
    max_packet: usize,
}

impl EcmFraming {
    /// `max_packet`: the bulk endpoint's (512 at high speed).
    pub fn new(max_packet: usize) -> Self {
        EcmFraming {
            max_packet: max_packet.max(1),
        }
    }
}

impl Framing for EcmFraming {
    fn cost(&self, _used: usize, frames: usize, frame_len: usize) -> Option<usize> {
        // One frame per transfer, whatever the coalescer's limit says.
        (frames == 0 && frame_len >= ETH_HLEN).then_some(frame_len)
    }
    fn close_cost(&self, _used: usize, _frames: usize) -> usize {
        0
    }
    fn open(&mut self, _buf: &mut Vec<u8>) {}
    fn append(&mut self, buf: &mut Vec<u8>, frame: &[u8]) {
        buf.extend_from_slice(frame);
    }
    fn close(&mut self, buf: &mut Vec<u8>) -> bool {
        buf.len().is_multiple_of(self.max_packet)
    }
}

#[derive(Debug, Default, Clone)]
pub struct EcmDecoder {
    stats: DecodeStats,
}

impl Decode for EcmDecoder {
    fn decode(&mut self, transfer: &[u8], frame: &mut dyn FnMut(&[u8])) {
        // A lone zero-length packet (the end marker of a frame that filled
        // its last packet, when read as a transfer of its own) is no frame.
        if transfer.is_empty() {
            return;
        }
        self.stats.transfers += 1;
        if transfer.len() < ETH_HLEN {
            self.stats.malformed += 1;
            return;
        }
        self.stats.frames += 1;
        self.stats.frame_bytes += transfer.len() as u64;
        frame(transfer);
    }
    fn stats(&self) -> &DecodeStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::time::Time;
    use crate::usb::net::{Coalescer, Limits, Push};

    fn frame(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
    }

    #[test]
    fn one_frame_per_transfer_whatever_the_limit() {
        let limits = Limits {
            max_frames: 6,
            max_transfer: 1514,
            timeout: Duration::from_micros(100),
        };
        let mut c = Coalescer::new(EcmFraming::new(512), limits);
        let t0 = Time::ZERO;
        assert_eq!(c.push(t0, &frame(100, 1)), Push::Added);
        assert_eq!(c.push(t0, &frame(100, 2)), Push::Full);
        let t = c.poll_transfer(t0).expect("closed by the second frame");
        assert_eq!((t.frames, t.zlp), (1, false));
        assert_eq!(t.buf, frame(100, 1));
        let mut d = EcmDecoder::default();
        let mut got = Vec::new();
        d.decode(&t.buf, &mut |f| got.push(f.to_vec()));
        assert_eq!(got, vec![frame(100, 1)]);
        assert_eq!(c.push(t0, &frame(100, 2)), Push::Added);
    }

    #[test]
    fn a_frame_filling_its_last_packet_asks_for_a_zlp() {
        let limits = Limits {
            max_frames: 1,
            max_transfer: 1514,
            timeout: Duration::ZERO,
        };
        let mut c = Coalescer::new(EcmFraming::new(512), limits);
        c.push(Time::ZERO, &frame(1024, 0));
        assert!(c.poll_transfer(Time::ZERO).unwrap().zlp);
        c.push(Time::ZERO, &frame(1025, 0));
        assert!(!c.poll_transfer(Time::ZERO).unwrap().zlp);
        assert_eq!(c.push(Time::ZERO, &frame(1515, 0)), Push::TooLarge);
        assert_eq!(c.push(Time::ZERO, &frame(10, 0)), Push::TooLarge);
        assert_eq!(c.too_large, 2);
    }

    #[test]
    fn runts_are_counted_and_dropped() {
        let mut d = EcmDecoder::default();
        let mut n = 0;
        d.decode(&[1, 2, 3], &mut |_| n += 1);
        d.decode(&[], &mut |_| n += 1);
        assert_eq!(n, 0);
        assert_eq!(d.stats().malformed, 1);
        assert_eq!(d.stats().transfers, 1);
    }
}
