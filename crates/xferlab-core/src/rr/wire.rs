//! The few bytes rr puts on the wire besides the payload (docs/protocol.md,
//! "Request/response flows").

use crate::transport::attach::{Attach, ATTACH_LEN, TOKEN_LEN};

/// Every UDP request and response starts with: sequence number (u64 BE,
/// from 0 per flow), flow id (u32 BE), reserved (u32, 0). A response
/// echoes the request's header.
pub const UDP_HEADER_LEN: usize = 16;

/// A TCP rr or crr connection opens with the session token and its flow
/// id (u32 BE), an attach record without a preamble; crr sends the
/// request right behind it in the same write.
pub const TCP_HELLO_LEN: usize = ATTACH_LEN;

pub fn encode_udp_header(buf: &mut [u8], seq: u64, flow: u32) {
    buf[..8].copy_from_slice(&seq.to_be_bytes());
    buf[8..12].copy_from_slice(&flow.to_be_bytes());
    buf[12..16].fill(0);
}

/// (sequence, flow) of a datagram, None when it is too short.
pub fn decode_udp_header(buf: &[u8]) -> Option<(u64, u32)> {
    if buf.len() < UDP_HEADER_LEN {
        return None;
    }
    let seq = u64::from_be_bytes(buf[..8].try_into().ok()?);
    let flow = u32::from_be_bytes(buf[8..12].try_into().ok()?);
    Some((seq, flow))
}

pub fn encode_tcp_hello(token: &[u8; TOKEN_LEN], flow: u32) -> [u8; TCP_HELLO_LEN] {
    Attach {
        token: *token,
        flow,
    }
    .encode()
}

/// (token, flow) of a connection's first bytes.
pub fn decode_tcp_hello(b: &[u8; TCP_HELLO_LEN]) -> ([u8; TOKEN_LEN], u32) {
    let a = Attach::decode(b);
    (a.token, a.flow)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let mut b = [0xffu8; 40];
        encode_udp_header(&mut b, 7, 3);
        assert_eq!(decode_udp_header(&b), Some((7, 3)));
        assert_eq!(decode_udp_header(&b[..15]), None);
        let t = [9u8; TOKEN_LEN];
        assert_eq!(decode_tcp_hello(&encode_tcp_hello(&t, 42)), (t, 42));
    }
}
