//! The build's name, version and control-protocol version, as results and
//! the handshake carry them.

use xferlab_core::proto::wire::VERSION;
use xferlab_core::result::Software;

pub fn software() -> Software {
    Software {
        name: "xferlab".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        protocol: VERSION,
    }
}
