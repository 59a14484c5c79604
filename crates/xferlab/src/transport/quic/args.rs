//! QUIC's flags, flattened into every verb that runs a test over a
//! transport: [`QuicArgs::knobs`] turns them into its knobs, and records
//! the certificate files, which are this process's own and never go to
//! the peer, for its flows ([`super::tls::set_files`]).

use std::path::PathBuf;

use clap::Args;
use xferlab_core::knobs::QuicKnobs;

use super::tls::{self, TlsFiles};

#[derive(Debug, Clone, Default, Args)]
pub struct QuicArgs {
    /// QUIC (--quic): concurrent streams on each flow's connection, the
    /// flow's bytes spread over them (default 1). -P sets the number of
    /// connections.
    #[arg(long, value_name = "N")]
    pub streams: Option<u32>,
    /// QUIC (--quic): the certificate chain (PEM) the server end presents,
    /// with --quic-key; without both, a self-signed certificate made for
    /// the run.
    #[arg(long, value_name = "FILE", requires = "quic_key")]
    pub quic_cert: Option<PathBuf>,
    /// QUIC (--quic): the private key (PEM) of --quic-cert.
    #[arg(long, value_name = "FILE", requires = "quic_cert")]
    pub quic_key: Option<PathBuf>,
    /// QUIC (--quic): verify the server's certificate against this CA
    /// (PEM); without it the client does not verify (the handshake is
    /// still signed by the server's key).
    #[arg(long, value_name = "FILE")]
    pub quic_ca: Option<PathBuf>,
    /// QUIC (--quic) with --quic-ca: the name the server's certificate
    /// must carry (default: the server's address, which then must be in
    /// the certificate's IP addresses).
    #[arg(long, value_name = "NAME", requires = "quic_ca")]
    pub quic_server_name: Option<String>,
}

impl QuicArgs {
    /// The knobs the flags name (None when none was given: the spec's
    /// check then says whether the transport takes them).
    pub fn knobs(&self) -> Option<QuicKnobs> {
        tls::set_files(TlsFiles {
            cert: self.quic_cert.clone(),
            key: self.quic_key.clone(),
            ca: self.quic_ca.clone(),
            server_name: self.quic_server_name.clone(),
        });
        self.streams.map(|streams| QuicKnobs { streams })
    }
}

/// `xferlab server`'s QUIC flags: the certificate its QUIC flows present.
#[derive(Debug, Clone, Default, Args)]
pub struct QuicServerArgs {
    /// The certificate chain (PEM) this server's QUIC flows (--quic)
    /// present, with --quic-key; without both, a self-signed certificate
    /// made when the server starts.
    #[arg(long, value_name = "FILE", requires = "quic_key")]
    pub quic_cert: Option<PathBuf>,
    /// The private key (PEM) of --quic-cert.
    #[arg(long, value_name = "FILE", requires = "quic_cert")]
    pub quic_key: Option<PathBuf>,
}

impl QuicServerArgs {
    /// Records the files for this process's QUIC flows, reading them (or
    /// making the self-signed certificate) now, so a bad file is one line
    /// when the server starts rather than a failed handshake later.
    pub fn apply(&self) -> Result<(), super::QuicError> {
        let files = TlsFiles {
            cert: self.quic_cert.clone(),
            key: self.quic_key.clone(),
            ..TlsFiles::default()
        };
        tls::server(&files)?;
        tls::set_files(files);
        Ok(())
    }
}
