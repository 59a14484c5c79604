//! USB 2.0 wire timing: bit times, packet lengths on the wire and frame
//! lengths at high and full speed, in integer ticks of 1/12 ns (a
//! high-speed bit is exactly 25 ticks, a full-speed bit 1000).

use serde::{Deserialize, Serialize};

/// Ticks per microsecond (1 tick = 1/12 ns).
pub const TICKS_PER_US: u64 = 12_000;

/// Microseconds to ticks, rounded to the nearest tick.
pub fn ticks(us: f64) -> u64 {
    (us * TICKS_PER_US as f64).round().max(0.0) as u64
}

/// Ticks to microseconds.
pub fn us(ticks: u64) -> f64 {
    ticks as f64 / TICKS_PER_US as f64
}

/// Signalling rate of a bus segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Speed {
    /// 480 Mbit/s, 125 us microframes, 512-byte bulk packets.
    High,
    /// 12 Mbit/s, 1 ms frames, 64-byte bulk packets.
    Full,
}

/// Packet framing and timing of one bus segment (USB 2.0 chapters 7 and 8).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phy {
    pub speed: Speed,
    /// One bit time.
    pub bit: u64,
    /// A (micro)frame: SOF to SOF.
    pub frame: u64,
    /// Bulk max packet size.
    pub max_packet: u32,
    sync_bits: u64,
    eop_bits: u64,
    sof_eop_bits: u64,
    /// Inter-packet gap after each packet's EOP.
    ipg_bits: u64,
    /// Extra bits per bit for bit stuffing.
    stuffing: f64,
}

impl Phy {
    pub fn new(speed: Speed, stuffing: f64) -> Phy {
        match speed {
            // High speed (USB 2.0 section 7.1.10, 7.1.13.2, 7.1.18.2): 32-bit
            // SYNC, 8-bit EOP (40 bits on SOF, for disconnect detection),
            // 88 bit times between packets. Token + data + handshake then
            // carry 55 bytes besides the payload, as table 5-10 counts.
            Speed::High => Phy {
                speed,
                bit: 25,
                frame: 125 * TICKS_PER_US,
                max_packet: 512,
                sync_bits: 32,
                eop_bits: 8,
                sof_eop_bits: 40,
                ipg_bits: 88,
                stuffing,
            },
            // Full speed: 8-bit SYNC, EOP of 2 SE0 bits and a J; table 5-9
            // counts 13 bytes of overhead per bulk transaction, which leaves
            // 3 bytes of EOP and inter-packet delay, one per packet.
            Speed::Full => Phy {
                speed,
                bit: 1000,
                frame: 1000 * TICKS_PER_US,
                max_packet: 64,
                sync_bits: 8,
                eop_bits: 3,
                sof_eop_bits: 3,
                ipg_bits: 5,
                stuffing,
            },
        }
    }

    /// One packet with `body` bits between SYNC and EOP, the gap after it
    /// included.
    fn packet(&self, body: u64, eop: u64) -> u64 {
        let stuffed = (body as f64 * self.stuffing).ceil() as u64;
        (self.sync_bits + body + stuffed + eop + self.ipg_bits) * self.bit
    }

    /// A token (IN, OUT, PING, SETUP): PID, address, endpoint, CRC5.
    pub fn token(&self) -> u64 {
        self.packet(8 + 16, self.eop_bits)
    }

    /// A data packet of `n` payload bytes: PID, payload, CRC16.
    pub fn data(&self, n: u32) -> u64 {
        self.packet(8 + 8 * n as u64 + 16, self.eop_bits)
    }

    /// A handshake (ACK, NAK, NYET, STALL): just a PID.
    pub fn handshake(&self) -> u64 {
        self.packet(8, self.eop_bits)
    }

    /// A start-of-frame packet: PID, frame number, CRC5.
    pub fn sof(&self) -> u64 {
        self.packet(8 + 16, self.sof_eop_bits)
    }

    /// The payload's own bits, without framing or stuffing.
    pub fn payload(&self, n: u32) -> u64 {
        8 * n as u64 * self.bit
    }

    /// A whole data transaction: token, data, handshake.
    pub fn transaction(&self, n: u32) -> u64 {
        self.token() + self.data(n) + self.handshake()
    }

    /// A transaction that moves no data: token and handshake (IN-NAK,
    /// PING-ACK, PING-NAK).
    pub fn poll(&self) -> u64 {
        self.token() + self.handshake()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_512_byte_high_speed_transaction_without_stuffing_is_567_bytes() {
        let hs = Phy::new(Speed::High, 0.0);
        // 512 payload + 55 bytes of protocol overhead (table 5-10) = 567
        // bytes at 480 Mbit/s (16.667 ns a byte) = 9.45 us.
        assert_eq!(hs.transaction(512), 567 * 8 * 25);
        assert_eq!(us(hs.transaction(512)), 9.45);
    }

    #[test]
    fn random_data_stuffing_adds_about_0_8_percent() {
        let hs = Phy::new(Speed::High, 0.0079);
        // token 24 bits + 1, data 4120 + 33, handshake 8 + 1: 4571 bits.
        assert_eq!(hs.transaction(512), 4571 * 25);
        assert!((us(hs.transaction(512)) - 9.5229).abs() < 1e-3);
    }

    #[test]
    fn full_speed_64_byte_transaction_is_77_bytes() {
        let fs = Phy::new(Speed::Full, 0.0);
        // 64 + 13 bytes (table 5-9) at 12 Mbit/s = 51.33 us.
        assert_eq!(fs.transaction(64), 77 * 8 * 1000);
    }

    #[test]
    fn transactions_that_fit_one_frame_match_the_spec_tables() {
        // Tables 5-10 and 5-9: 13 512-byte transactions per microframe at
        // high speed, 19 64-byte ones per frame at full speed; with
        // worst-case stuffing only 11 fit a microframe.
        let fits = |phy: Phy, n: u32| (phy.frame - phy.sof()) / phy.transaction(n);
        assert_eq!(fits(Phy::new(Speed::High, 0.0079), 512), 13);
        assert_eq!(fits(Phy::new(Speed::High, 1.0 / 6.0), 512), 11);
        assert_eq!(fits(Phy::new(Speed::Full, 0.0079), 64), 19);
    }
}
