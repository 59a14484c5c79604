//! xferlab's own DCCP (RFC 4340) with CCID2 (RFC 4341), CCID3 (RFC 4342,
//! TFRC per RFC 5348) and the experimental SafeUDP (CCID 248), sans-IO:
//! packets in and out as bytes, time passed in, no clock or socket of its
//! own. Carried over UDP (RFC 6773) or raw
//! IP protocol 33 by a driver in the binary.

pub mod ackvec;
pub mod ccid;
pub mod checksum;
pub mod conn;
pub mod feature;
#[cfg(any(test, feature = "fuzz"))]
pub mod fuzz;
pub mod knobs;
pub mod options;
pub mod packet;
pub mod queue;
pub mod react;
pub mod seq;
#[cfg(test)]
pub(crate) mod sim;
pub mod window;

pub use conn::{CloseReason, Config, Connection, Event, State, Stats};
pub use packet::{Body, Header, Packet, PacketType, ResetCode};
pub use seq::Seq;

/// Why a packet or an operation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DccpError {
    #[error("DCCP packet shorter than its header")]
    Truncated,
    #[error("DCCP packet type is reserved (10..15)")]
    ReservedType,
    #[error("short (24-bit) sequence numbers on a packet type that must use 48 bits")]
    ShortSeqNotAllowed,
    #[error("DCCP data offset is outside the packet or inside the header")]
    BadDataOffset,
    #[error("DCCP checksum coverage reaches past the end of the packet")]
    BadCsCov,
    #[error("DCCP checksum mismatch")]
    BadChecksum,
    #[error("malformed DCCP option {0}")]
    BadOption(u8),
    #[error("DCCP option {0} was marked Mandatory but is not understood")]
    MandatoryError(u8),
    #[error("DCCP options exceed 1020 bytes (or one option 255)")]
    OptionTooLong,
    #[error("buffer too small for the DCCP packet")]
    BufferTooSmall,
}
