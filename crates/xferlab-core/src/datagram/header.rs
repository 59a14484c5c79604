//! The 16 bytes at the front of every test datagram.
//!
//! Layout: `[u64 seq, big-endian][u64 send_ns, big-endian]`. `seq` counts
//! from 0 per flow, so the receiver can tell loss, reordering and
//! duplication apart; `send_ns` is the sender's clock in nanoseconds since
//! its flow started, so the receiver can estimate jitter and one-way-delay
//! variation without synchronised clocks (only differences of transit
//! times are used). Big-endian so a packet capture reads naturally and both
//! ends agree whatever their byte order. The rest of the datagram is
//! padding the receiver does not look at.

/// Bytes of header at the start of every datagram.
pub const HEADER_LEN: usize = 16;

/// Writes the header into the first [`HEADER_LEN`] bytes of `buf`, leaving
/// the rest untouched (the payload is written once and reused).
///
/// # Panics
/// If `buf` is shorter than [`HEADER_LEN`]: the sender sizes its buffers
/// from a validated datagram length, so a short one is a bug, not input.
pub fn write_header(buf: &mut [u8], seq: u64, send_ns: u64) {
    assert!(
        buf.len() >= HEADER_LEN,
        "datagram buffer of {} bytes cannot hold the {HEADER_LEN}-byte header",
        buf.len()
    );
    buf[..8].copy_from_slice(&seq.to_be_bytes());
    buf[8..HEADER_LEN].copy_from_slice(&send_ns.to_be_bytes());
}

/// Reads `(seq, send_ns)` from the front of a received datagram; None if it
/// is too short to carry a header (foreign or truncated traffic is counted
/// by the caller, never a panic).
pub fn read_header(buf: &[u8]) -> Option<(u64, u64)> {
    let seq = buf.get(..8)?;
    let send = buf.get(8..HEADER_LEN)?;
    Some((
        u64::from_be_bytes(seq.try_into().ok()?),
        u64::from_be_bytes(send.try_into().ok()?),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_extremes_and_is_big_endian() {
        let mut buf = [0xAAu8; 20];
        write_header(&mut buf, 0x0102_0304_0506_0708, u64::MAX);
        assert_eq!(&buf[..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&buf[8..16], &[0xFF; 8]);
        assert_eq!(&buf[16..], &[0xAA; 4], "payload past the header untouched");
        assert_eq!(read_header(&buf), Some((0x0102_0304_0506_0708, u64::MAX)));
        write_header(&mut buf[..HEADER_LEN], u64::MAX, 0);
        assert_eq!(read_header(&buf[..HEADER_LEN]), Some((u64::MAX, 0)));
    }

    #[test]
    fn short_input_is_none_not_a_panic() {
        for len in 0..HEADER_LEN {
            assert_eq!(read_header(&vec![0u8; len]), None, "len {len}");
        }
    }

    #[test]
    #[should_panic(expected = "cannot hold")]
    fn writing_into_a_short_buffer_panics() {
        write_header(&mut [0u8; HEADER_LEN - 1], 1, 2);
    }
}
