//! Pre-shared-key authentication of xferlab clients, off unless the
//! server has keys: after the client's hello the server sends a random
//! nonce, and the client answers with HMAC-SHA256, keyed with a key both
//! ends hold, over a label, the nonce and the exact hello it sent (irtt's
//! scheme, once per test rather than per packet). The nonce makes every
//! answer single-use; covering the hello ties the answer to the test
//! asked for. The key never crosses the wire.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of the server's nonce (the driver draws them).
pub const NONCE_LEN: usize = 32;
/// Shortest key accepted (a shorter one is guessable offline from one
/// recorded exchange).
pub const MIN_KEY_LEN: usize = 16;
const LABEL: &[u8] = b"xferlab auth v1\0";

/// What a server with authentication on holds for one session.
#[derive(Debug, Clone)]
pub struct ServerAuth {
    /// Every key a client may hold.
    pub keys: std::sync::Arc<Vec<Vec<u8>>>,
    pub nonce: [u8; NONCE_LEN],
}

fn keyed(key: &[u8], nonce: &[u8], hello: &[u8]) -> Hmac<Sha256> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    m.update(LABEL);
    m.update(nonce);
    m.update(hello);
    m
}

/// The client's answer to `nonce` for the hello frame payload `hello`.
pub fn answer(key: &[u8], nonce: &[u8], hello: &[u8]) -> [u8; 32] {
    keyed(key, nonce, hello).finalize().into_bytes().into()
}

/// Whether `mac` answers `nonce` for `hello` with one of `keys` (each
/// compared in constant time).
pub fn verify(keys: &[Vec<u8>], nonce: &[u8], hello: &[u8], mac: &[u8]) -> bool {
    keys.iter()
        .any(|k| keyed(k, nonce, hello).verify_slice(mac).is_ok())
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bytes from hex; None if it is not hex of even length.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Reads a key file: one key per line (blank lines and lines starting
/// with `#` skipped), each at least [`MIN_KEY_LEN`] bytes, taken as
/// written (surrounding whitespace trimmed). A client uses the first.
pub fn parse_keys(text: &str) -> Result<Vec<Vec<u8>>, String> {
    let keys: Vec<Vec<u8>> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.as_bytes().to_vec())
        .collect();
    if keys.is_empty() {
        return Err("holds no key (one key per line)".into());
    }
    if let Some(k) = keys.iter().find(|k| k.len() < MIN_KEY_LEN) {
        return Err(format!(
            "has a key of {} bytes; keys must be at least {MIN_KEY_LEN} (e.g. `head -c 32 /dev/urandom | base64`)",
            k.len()
        ));
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_verify_only_with_the_same_key_nonce_and_hello() {
        let keys = vec![
            b"another key of 16+ bytes".to_vec(),
            b"the right key, 16+ bytes".to_vec(),
        ];
        let n = [7u8; NONCE_LEN];
        let mac = answer(&keys[1], &n, b"hello");
        assert!(verify(&keys, &n, b"hello", &mac));
        assert!(!verify(&keys[..1], &n, b"hello", &mac));
        assert!(!verify(&keys, &[8u8; NONCE_LEN], b"hello", &mac));
        assert!(!verify(&keys, &n, b"hellO", &mac));
        assert!(!verify(&keys, &n, b"hello", &mac[..31]));
        assert_eq!(unhex(&hex(&mac)).unwrap(), mac);
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("abc"), None);
    }

    #[test]
    fn key_files() {
        assert_eq!(
            parse_keys("# comment\n\n  sixteen-bytes-key!  \nsecond key 16 bytes\n").unwrap(),
            vec![
                b"sixteen-bytes-key!".to_vec(),
                b"second key 16 bytes".to_vec()
            ]
        );
        assert!(parse_keys("\n# only a comment\n")
            .unwrap_err()
            .contains("no key"));
        assert!(parse_keys("short\n").unwrap_err().contains("at least 16"));
    }
}
