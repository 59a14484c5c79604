//! How a data connection names its session: the session token and the
//! flow id it opens with (after xferlab's preamble, or alone where a
//! pattern's own connections carry it, as rr's TCP hello does).

/// The session token's length.
pub const TOKEN_LEN: usize = 16;
/// Token + flow id.
pub const ATTACH_LEN: usize = TOKEN_LEN + 4;

/// Sent by the client on a new data connection: token, flow id (u32 BE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attach {
    pub token: [u8; TOKEN_LEN],
    pub flow: u32,
}

impl Attach {
    pub fn encode(&self) -> [u8; ATTACH_LEN] {
        let mut out = [0u8; ATTACH_LEN];
        out[..TOKEN_LEN].copy_from_slice(&self.token);
        out[TOKEN_LEN..].copy_from_slice(&self.flow.to_be_bytes());
        out
    }
    pub fn decode(b: &[u8; ATTACH_LEN]) -> Self {
        let mut token = [0u8; TOKEN_LEN];
        token.copy_from_slice(&b[..TOKEN_LEN]);
        Attach {
            token,
            flow: u32::from_be_bytes(b[TOKEN_LEN..].try_into().expect("4 bytes")),
        }
    }
}
