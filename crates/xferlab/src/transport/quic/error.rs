//! Why a QUIC flow could not be set up: one line naming the cause and
//! the flag that fixes it.

use std::path::PathBuf;

use crate::transport::SetupError;

#[derive(Debug, thiserror::Error)]
pub enum QuicError {
    #[error("--quic-cert and --quic-key go together: give both (PEM files), or neither for a self-signed certificate")]
    CertWithoutKey,
    #[error("cannot read the {what} in {}: {err} (--quic-cert, --quic-key and --quic-ca take PEM files)", .path.display())]
    Pem {
        path: PathBuf,
        what: &'static str,
        err: String,
    },
    #[error("cannot make the self-signed QUIC certificate: {0}")]
    SelfSigned(String),
    #[error("QUIC TLS setup: {0}")]
    Tls(String),
}

impl From<QuicError> for SetupError {
    fn from(e: QuicError) -> Self {
        SetupError::Own(Box::new(e))
    }
}
