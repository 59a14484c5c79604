//! QUIC's TLS 1.3 (rustls with the ring provider), ALPN `xferlab`. The
//! server end presents a self-signed certificate made once per process
//! (rcgen) unless `--quic-cert`/`--quic-key` name one; the client
//! verifies the server's certificate only against `--quic-ca`, else
//! accepts any (a measurement tool's default: the peer was named on the
//! command line), still checking the handshake's signatures.
//!
//! The files are this process's own (never sent to the peer): the flags
//! set them here when the command line is read ([`set_files`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use quinn_proto::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls13_signature, CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use super::error::QuicError;

/// The ALPN both ends speak for xferlab's QUIC flows.
pub const ALPN: &[u8] = b"xferlab";

/// The certificate files this process uses, from its command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The server end's certificate chain and key (PEM).
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// The CA the client verifies the server's certificate against.
    pub ca: Option<PathBuf>,
    /// The name the client verifies (default: the server's address).
    pub server_name: Option<String>,
}

static FILES: Mutex<Option<TlsFiles>> = Mutex::new(None);

/// Records the command line's certificate files for this process's flows.
pub fn set_files(files: TlsFiles) {
    *FILES.lock().unwrap_or_else(|e| e.into_inner()) = Some(files);
}

pub fn files() -> TlsFiles {
    FILES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .unwrap_or_default()
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server end's TLS: the given certificate, or the process's
/// self-signed one.
pub fn server(files: &TlsFiles) -> Result<Arc<QuicServerConfig>, QuicError> {
    server_for(files, ALPN)
}

/// As [`server`], for another application protocol (`alpn`: the QUIC
/// perf port's `perf`), with the same certificate.
pub fn server_for(files: &TlsFiles, alpn: &[u8]) -> Result<Arc<QuicServerConfig>, QuicError> {
    let (chain, key) = match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => identity_from_files(cert, key)?,
        (None, None) => self_signed()?,
        _ => return Err(QuicError::CertWithoutKey),
    };
    server_config(chain, key, alpn).map_err(|e| QuicError::Tls(e.to_string()))
}

type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// The process's self-signed certificate, made once.
fn self_signed() -> Result<Identity, QuicError> {
    static ONCE: OnceLock<Result<(CertificateDer<'static>, Vec<u8>), String>> = OnceLock::new();
    let (cert, key) = ONCE
        .get_or_init(|| {
            let ck = rcgen::generate_simple_self_signed(vec!["xferlab".to_string()])
                .map_err(|e| e.to_string())?;
            Ok((ck.cert.der().clone(), ck.signing_key.serialize_der()))
        })
        .clone()
        .map_err(QuicError::SelfSigned)?;
    Ok((vec![cert], PrivateKeyDer::Pkcs8(key.into())))
}

fn identity_from_files(cert: &Path, key: &Path) -> Result<Identity, QuicError> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| QuicError::Pem {
            path: cert.to_path_buf(),
            what: "certificate",
            err: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(QuicError::Pem {
            path: cert.to_path_buf(),
            what: "certificate",
            err: "no certificate in it".into(),
        });
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| QuicError::Pem {
        path: key.to_path_buf(),
        what: "private key",
        err: e.to_string(),
    })?;
    Ok((chain, key))
}

fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    alpn: &[u8],
) -> Result<Arc<QuicServerConfig>, rustls::Error> {
    let mut c = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    c.alpn_protocols = vec![alpn.to_vec()];
    c.max_early_data_size = 0;
    // No session tickets: every handshake is a full one (rr's quic-crr
    // pays one per transaction, as tcp-crr pays its SYN; nothing here
    // needs resumption).
    c.send_tls13_tickets = 0;
    QuicServerConfig::try_from(c)
        .map(Arc::new)
        .map_err(|e| rustls::Error::General(e.to_string()))
}

/// The client's TLS: verifying against `files.ca`, or not at all.
pub fn client(files: &TlsFiles) -> Result<Arc<QuicClientConfig>, QuicError> {
    client_for(files, ALPN)
}

/// As [`client`], for another application protocol (`alpn`).
pub fn client_for(files: &TlsFiles, alpn: &[u8]) -> Result<Arc<QuicClientConfig>, QuicError> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| QuicError::Tls(e.to_string()))?;
    let mut c = match &files.ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            let certs = CertificateDer::pem_file_iter(ca)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| QuicError::Pem {
                    path: ca.clone(),
                    what: "CA certificate",
                    err: e.to_string(),
                })?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(QuicError::Pem {
                    path: ca.clone(),
                    what: "CA certificate",
                    err: "no usable certificate in it".into(),
                });
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(
                provider().signature_verification_algorithms,
            )))
            .with_no_client_auth(),
    };
    c.alpn_protocols = vec![alpn.to_vec()];
    QuicClientConfig::try_from(c)
        .map(Arc::new)
        .map_err(|e| QuicError::Tls(e.to_string()))
}

/// The name the client asks for and verifies: `--quic-server-name`, else
/// the server's address.
pub fn server_name(files: &TlsFiles, peer: std::net::IpAddr) -> String {
    files.server_name.clone().unwrap_or_else(|| {
        crate::net::canonical(std::net::SocketAddr::new(peer, 0))
            .ip()
            .to_string()
    })
}

/// Accepts any server certificate (no `--quic-ca`), checking only that
/// the handshake was signed by its key.
#[derive(Debug)]
struct NoVerify(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        // TLS 1.3 only (QUIC).
        Err(rustls::Error::PeerIncompatible(
            rustls::PeerIncompatible::Tls12NotOffered,
        ))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}
