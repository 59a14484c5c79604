//! Authentication on the server's side, off unless keys are given: keys
//! from a file (`--auth-key`), a fresh nonce per session, and failed
//! attempts counted per client address, so nobody can try keys (or
//! iperf3 passwords) at line rate: after `--auth-max-failures` (5)
//! failures within `--auth-window` (60 s), an address is refused until
//! the window has passed.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use xferlab_core::proto::auth::{parse_keys, NONCE_LEN};

use super::shared::lock;

/// Failed attempts an address may make per [`WINDOW`] by default: a
/// user who mistypes a password a few times is not locked out, a
/// guesser gets 7,200 tries a day.
pub const MAX_FAILURES: u32 = 5;
/// The default window failed attempts are counted in.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Addresses remembered at most (older records are dropped first once
/// this many are kept).
const MAX_TRACKED: usize = 4096;

/// Why a key or users file cannot be used: one line naming the flag and
/// the file.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("{flag} {}: {err}", .path.display())]
    Read {
        flag: &'static str,
        path: PathBuf,
        err: io::Error,
    },
    #[error("--auth-key {} {why}", .path.display())]
    BadKeys { path: PathBuf, why: String },
    #[error("--rsa-private-key-path {}: not an unencrypted RSA private key in PEM ({err}); make one with `openssl genrsa -out private.pem 2048`", .path.display())]
    NotRsaKey {
        path: PathBuf,
        err: rsa::pkcs8::Error,
    },
    #[error("--authorized-users-path {}: no `user,sha256hex` lines (the hash is sha256 of \"{{user}}password\")", .path.display())]
    NoUsers { path: PathBuf },
}

fn read(flag: &'static str, path: &Path) -> Result<String, KeyFileError> {
    std::fs::read_to_string(path).map_err(|err| KeyFileError::Read {
        flag,
        path: path.to_path_buf(),
        err,
    })
}

/// Reads `--auth-key FILE`: one key per line.
pub fn load_keys(path: &Path) -> Result<Vec<Vec<u8>>, KeyFileError> {
    parse_keys(&read("--auth-key", path)?).map_err(|why| KeyFileError::BadKeys {
        path: path.to_path_buf(),
        why,
    })
}

/// A fresh random nonce for one session's challenge.
pub fn nonce() -> Result<[u8; NONCE_LEN], getrandom::Error> {
    let mut n = [0u8; NONCE_LEN];
    getrandom::fill(&mut n)?;
    Ok(n)
}

/// Why an iperf3 client's `authtoken` is refused (for the log and the
/// refusal).
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("no credentials (iperf3 --username and --rsa-public-key-path)")]
    Missing,
    #[error("the token is not base64")]
    NotBase64,
    #[error("the token does not decrypt with this server's key")]
    Undecryptable,
    #[error("the token is not `user: U pwd: P ts: T`")]
    Malformed,
    #[error("the token's time stamp is not a number")]
    BadTime,
    #[error("user {user}: the token's time stamp is {off} s from this server's clock (at most {IPERF3_SKEW})")]
    Skew { user: String, off: u64 },
    #[error("user {0}: unknown user or wrong password")]
    Unknown(String),
}

/// Failed attempts per client address.
pub struct Failures {
    by_addr: Mutex<HashMap<IpAddr, (Instant, u32)>>,
    /// Failures allowed per window.
    pub max: u32,
    pub window: Duration,
}

impl Default for Failures {
    fn default() -> Self {
        Failures::new(MAX_FAILURES, WINDOW)
    }
}

impl Failures {
    pub fn new(max: u32, window: Duration) -> Self {
        Failures {
            by_addr: Mutex::default(),
            max,
            window,
        }
    }

    /// "N of M allowed per S s from this address", for log lines and
    /// refusals after failure `n`.
    pub fn describe(&self, n: u32) -> String {
        format!(
            "{n} of {} allowed per {} s from this address",
            self.max,
            self.window.as_secs_f64()
        )
    }

    /// How long `ip` is still refused, if it used up its attempts.
    pub fn locked_out(&self, ip: IpAddr) -> Option<Duration> {
        let map = lock(&self.by_addr);
        let (since, n) = map.get(&ip)?;
        let left = self.window.checked_sub(since.elapsed())?;
        (*n >= self.max).then_some(left)
    }

    /// Counts a failed attempt from `ip`; returns the count in the
    /// current window.
    pub fn record(&self, ip: IpAddr) -> u32 {
        let mut map = lock(&self.by_addr);
        let now = Instant::now();
        if map.len() >= MAX_TRACKED {
            map.retain(|_, (since, _)| now.duration_since(*since) < self.window);
            if map.len() >= MAX_TRACKED {
                if let Some(oldest) = map.iter().min_by_key(|(_, (s, _))| *s).map(|(k, _)| *k) {
                    map.remove(&oldest);
                }
            }
        }
        let e = map.entry(ip).or_insert((now, 0));
        if now.duration_since(e.0) >= self.window {
            *e = (now, 0);
        }
        e.1 += 1;
        e.1
    }
}

/// iperf3's own authentication (`--rsa-private-key-path`,
/// `--authorized-users-path`): the client sends, in its parameters, a
/// base64 `authtoken`: `user: U\npwd:  P\nts:   T` encrypted with the
/// server's RSA public key (OAEP from iperf3 3.17, PKCS#1 v1.5 before;
/// both are tried). The server decrypts it, checks the time stamp is
/// within [`IPERF3_SKEW`] of its clock and that the users file has
/// `U,sha256("{U}P")`.
pub struct Iperf3Users {
    key: rsa::RsaPrivateKey,
    /// (user, lower-case hex of sha256("{user}password")).
    users: Vec<(String, String)>,
}

impl std::fmt::Debug for Iperf3Users {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Iperf3Users({} users)", self.users.len())
    }
}

/// How far a token's time stamp may be from the server's clock (iperf3's
/// default `--time-skew-threshold`).
pub const IPERF3_SKEW: u64 = 10;

impl Iperf3Users {
    /// Reads the private key (PEM, PKCS#1 or PKCS#8, unencrypted) and the
    /// users file (`user,sha256hex` per line, `#` comments), as iperf3's
    /// server does.
    pub fn load(key: &Path, users: &Path) -> Result<Self, KeyFileError> {
        use rsa::pkcs1::DecodeRsaPrivateKey;
        use rsa::pkcs8::DecodePrivateKey;
        let pem = read("--rsa-private-key-path", key)?;
        let key = rsa::RsaPrivateKey::from_pkcs1_pem(&pem)
            .or_else(|_| rsa::RsaPrivateKey::from_pkcs8_pem(&pem))
            .map_err(|err| KeyFileError::NotRsaKey {
                path: key.to_path_buf(),
                err,
            })?;
        let text = read("--authorized-users-path", users)?;
        let list: Vec<(String, String)> = text
            .lines()
            .map(|l| l.trim_end_matches('\r'))
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .filter_map(|l| {
                let (u, h) = l.split_once(',')?;
                Some((u.to_string(), h.split(',').next()?.to_ascii_lowercase()))
            })
            .collect();
        if list.is_empty() {
            return Err(KeyFileError::NoUsers {
                path: users.to_path_buf(),
            });
        }
        Ok(Iperf3Users { key, users: list })
    }

    /// Checks an `authtoken` at `now_s` (seconds since the epoch);
    /// returns the user name, or why it fails (for the log).
    pub fn check(&self, token: &str, now_s: i64) -> Result<String, TokenError> {
        use base64::Engine;
        use sha2::Digest;
        let raw = base64::engine::general_purpose::STANDARD
            .decode(token.trim())
            .map_err(|_| TokenError::NotBase64)?;
        let plain = self
            .key
            .decrypt(rsa::Oaep::new::<sha1::Sha1>(), &raw)
            .or_else(|_| self.key.decrypt(rsa::Pkcs1v15Encrypt, &raw))
            .map_err(|_| TokenError::Undecryptable)?;
        let text = String::from_utf8_lossy(&plain);
        let f: Vec<&str> = text.split_whitespace().collect();
        let [u_l, user, p_l, pwd, t_l, ts] = f[..] else {
            return Err(TokenError::Malformed);
        };
        if (u_l, p_l, t_l) != ("user:", "pwd:", "ts:") {
            return Err(TokenError::Malformed);
        }
        let ts: i64 = ts.parse().map_err(|_| TokenError::BadTime)?;
        if now_s.abs_diff(ts) > IPERF3_SKEW {
            return Err(TokenError::Skew {
                user: user.to_string(),
                off: now_s.abs_diff(ts),
            });
        }
        let hash: String = sha2::Sha256::digest(format!("{{{user}}}{pwd}").as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        if self.users.iter().any(|(u, h)| u == user && *h == hash) {
            Ok(user.to_string())
        } else {
            Err(TokenError::Unknown(user.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_refused_after_its_failures_and_others_are_not() {
        let f = Failures::default();
        let a: IpAddr = [192, 0, 2, 1].into();
        for i in 1..=MAX_FAILURES {
            assert_eq!(f.locked_out(a), None);
            assert_eq!(f.record(a), i);
        }
        assert!(f.locked_out(a).is_some_and(|d| d <= WINDOW));
        assert_eq!(f.locked_out([192, 0, 2, 2].into()), None);
    }
}
