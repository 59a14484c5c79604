//! USB descriptors as bytes: parsing a configuration descriptor (what usbfs
//! hands back for a device) and choosing the bulk endpoints to test.

use std::fmt;

pub const DT_DEVICE: u8 = 1;
pub const DT_CONFIG: u8 = 2;
pub const DT_INTERFACE: u8 = 4;
pub const DT_ENDPOINT: u8 = 5;
pub const DT_SS_ENDPOINT_COMP: u8 = 0x30;

pub const EP_DIR_IN: u8 = 0x80;
pub const XFER_BULK: u8 = 2;

/// One endpoint descriptor (and its SuperSpeed companion, if any).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointDesc {
    /// bEndpointAddress: number | 0x80 for IN.
    pub address: u8,
    /// bmAttributes: transfer type in the low two bits.
    pub attributes: u8,
    /// wMaxPacketSize, bits 0..10 (high-bandwidth multiplier bits dropped).
    pub max_packet: u16,
    pub interval: u8,
    /// SuperSpeed companion bMaxBurst (packets per burst - 1).
    pub max_burst: Option<u8>,
}

impl EndpointDesc {
    pub fn is_in(&self) -> bool {
        self.address & EP_DIR_IN != 0
    }
    pub fn is_bulk(&self) -> bool {
        self.attributes & 3 == XFER_BULK
    }
}

impl fmt::Display for EndpointDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "0x{:02x} ({} {}, max packet {})",
            self.address,
            ["control", "isochronous", "bulk", "interrupt"][usize::from(self.attributes & 3)],
            if self.is_in() { "IN" } else { "OUT" },
            self.max_packet
        )
    }
}

/// One interface alternate setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceDesc {
    pub number: u8,
    pub alt: u8,
    pub class: u8,
    pub subclass: u8,
    pub protocol: u8,
    pub endpoints: Vec<EndpointDesc>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigDesc {
    pub value: u8,
    pub max_power: u8,
    pub interfaces: Vec<InterfaceDesc>,
}

/// Parses a whole configuration descriptor (wTotalLength bytes). Unknown
/// descriptors (class-specific, IADs, BOS pieces) are skipped.
pub fn parse_config(bytes: &[u8]) -> Result<ConfigDesc, DescriptorError> {
    if bytes.len() < 9 || bytes[1] != DT_CONFIG {
        return Err(DescriptorError::NotConfig);
    }
    let total = usize::from(u16::from_le_bytes([bytes[2], bytes[3]]));
    let bytes = &bytes[..total.min(bytes.len())];
    let mut cfg = ConfigDesc {
        value: bytes[5],
        max_power: bytes[8],
        interfaces: Vec::new(),
    };
    let mut pos = usize::from(bytes[0]);
    while pos + 2 <= bytes.len() {
        let len = usize::from(bytes[pos]);
        if len < 2 || pos + len > bytes.len() {
            return Err(DescriptorError::PastEnd {
                pos,
                len,
                total: bytes.len(),
            });
        }
        let d = &bytes[pos..pos + len];
        match d[1] {
            DT_INTERFACE if len >= 9 => cfg.interfaces.push(InterfaceDesc {
                number: d[2],
                alt: d[3],
                class: d[5],
                subclass: d[6],
                protocol: d[7],
                endpoints: Vec::new(),
            }),
            DT_ENDPOINT if len >= 7 => {
                let Some(intf) = cfg.interfaces.last_mut() else {
                    return Err(DescriptorError::OrphanEndpoint { pos });
                };
                intf.endpoints.push(EndpointDesc {
                    address: d[2],
                    attributes: d[3],
                    max_packet: u16::from_le_bytes([d[4], d[5]]) & 0x7ff,
                    interval: d[6],
                    max_burst: None,
                });
            }
            DT_SS_ENDPOINT_COMP if len >= 6 => {
                if let Some(ep) = cfg
                    .interfaces
                    .last_mut()
                    .and_then(|i| i.endpoints.last_mut())
                {
                    ep.max_burst = Some(d[2]);
                }
            }
            _ => {}
        }
        pos += len;
    }
    Ok(cfg)
}

/// A configuration descriptor that does not parse, or that lacks the
/// endpoints a test asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DescriptorError {
    #[error("not a configuration descriptor")]
    NotConfig,
    #[error("descriptor at offset {pos} has length {len}, past the end ({total} bytes)")]
    PastEnd {
        pos: usize,
        len: usize,
        total: usize,
    },
    #[error("endpoint descriptor at offset {pos} before any interface")]
    OrphanEndpoint { pos: usize },
    #[error("configuration {config} has no interface {interface} (it has: {have}); pick one with --interface")]
    NoInterface {
        config: u8,
        interface: u8,
        /// The interface numbers it has, comma-separated.
        have: String,
    },
    #[error("endpoint {endpoint} on interface {interface} is not a bulk {} endpoint", if *want_in { "IN" } else { "OUT" })]
    NotBulk {
        endpoint: EndpointDesc,
        interface: u8,
        want_in: bool,
    },
    #[error("interface {interface} alt {alt} has no endpoint 0x{address:02x}")]
    NoEndpoint { interface: u8, alt: u8, address: u8 },
    #[error("the device has no bulk endpoints in its active configuration; name them with --ep-in/--ep-out or pick another --interface")]
    NoBulk,
}

/// The endpoints a test uses: at most one bulk IN and one bulk OUT on one
/// interface alternate setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkPipes {
    pub interface: u8,
    pub alt: u8,
    pub bulk_in: Option<EndpointDesc>,
    pub bulk_out: Option<EndpointDesc>,
}

/// What the user asked for: an interface and/or endpoint addresses, or
/// nothing (first interface with bulk endpoints).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PipeRequest {
    pub interface: Option<u8>,
    pub ep_in: Option<u8>,
    pub ep_out: Option<u8>,
}

/// Chooses the bulk endpoints: explicit addresses must exist and be bulk
/// in the right direction; otherwise the first alt setting (of the named
/// interface, or any) that has bulk endpoints wins, preferring one with both.
pub fn find_bulk_pipes(cfg: &ConfigDesc, req: PipeRequest) -> Result<BulkPipes, DescriptorError> {
    let candidates: Vec<&InterfaceDesc> = cfg
        .interfaces
        .iter()
        .filter(|i| req.interface.is_none_or(|n| n == i.number))
        .collect();
    if candidates.is_empty() {
        let have: Vec<String> = cfg
            .interfaces
            .iter()
            .map(|i| i.number.to_string())
            .collect();
        return Err(DescriptorError::NoInterface {
            config: cfg.value,
            interface: req.interface.unwrap_or(0),
            have: have.join(", "),
        });
    }
    let explicit = |intf: &InterfaceDesc,
                    addr: Option<u8>,
                    want_in: bool|
     -> Result<Option<EndpointDesc>, DescriptorError> {
        let Some(a) = addr else {
            return Ok(intf
                .endpoints
                .iter()
                .find(|e| e.is_bulk() && e.is_in() == want_in)
                .copied());
        };
        match intf.endpoints.iter().find(|e| e.address == a) {
            Some(e) if e.is_bulk() && e.is_in() == want_in => Ok(Some(*e)),
            Some(e) => Err(DescriptorError::NotBulk {
                endpoint: *e,
                interface: intf.number,
                want_in,
            }),
            None => Err(DescriptorError::NoEndpoint {
                interface: intf.number,
                alt: intf.alt,
                address: a,
            }),
        }
    };
    let mut first_err = None;
    let mut best: Option<BulkPipes> = None;
    for intf in candidates {
        let pipes = explicit(intf, req.ep_in, true).and_then(|i| {
            explicit(intf, req.ep_out, false).map(|o| BulkPipes {
                interface: intf.number,
                alt: intf.alt,
                bulk_in: i,
                bulk_out: o,
            })
        });
        match pipes {
            Ok(p) if p.bulk_in.is_some() && p.bulk_out.is_some() => return Ok(p),
            Ok(p) if p.bulk_in.is_some() || p.bulk_out.is_some() => {
                best.get_or_insert(p);
            }
            Ok(_) => {}
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    if let Some(b) = best {
        return Ok(b);
    }
    Err(first_err.unwrap_or(DescriptorError::NoBulk))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The configuration descriptor of the kernel's SourceSink gadget at
    /// high speed (interface 0: bulk IN 0x81 and bulk OUT 0x01, 512 B;
    /// alt 1 adds isochronous endpoints), as usbfs reports it.
    pub(crate) fn sourcesink_hs() -> Vec<u8> {
        let mut d = vec![9, 2, 0, 0, 1, 1, 0, 0x80, 0x32];
        d.extend([9, 4, 0, 0, 2, 0xff, 0, 0, 0]);
        d.extend([7, 5, 0x81, 2, 0x00, 0x02, 0]);
        d.extend([7, 5, 0x01, 2, 0x00, 0x02, 0]);
        d.extend([9, 4, 0, 1, 4, 0xff, 0, 0, 0]);
        d.extend([7, 5, 0x81, 2, 0x00, 0x02, 0]);
        d.extend([7, 5, 0x01, 2, 0x00, 0x02, 0]);
        d.extend([7, 5, 0x82, 1, 0x00, 0x04, 4]);
        d.extend([7, 5, 0x02, 1, 0x00, 0x04, 4]);
        let n = d.len() as u16;
        d[2..4].copy_from_slice(&n.to_le_bytes());
        d
    }

    #[test]
    fn parses_sourcesink_and_picks_its_bulk_pair() {
        let cfg = parse_config(&sourcesink_hs()).unwrap();
        assert_eq!(cfg.value, 1);
        assert_eq!(cfg.interfaces.len(), 2);
        assert_eq!(cfg.interfaces[1].endpoints.len(), 4);
        let p = find_bulk_pipes(&cfg, PipeRequest::default()).unwrap();
        assert_eq!((p.interface, p.alt), (0, 0));
        assert_eq!(p.bulk_in.unwrap().address, 0x81);
        assert_eq!(p.bulk_in.unwrap().max_packet, 512);
        assert_eq!(p.bulk_out.unwrap().address, 0x01);
    }

    #[test]
    fn superspeed_companion_is_attached_to_its_endpoint() {
        let mut d = vec![9, 2, 0, 0, 1, 1, 0, 0x80, 0x32];
        d.extend([9, 4, 0, 0, 1, 0xff, 0, 0, 0]);
        d.extend([7, 5, 0x81, 2, 0x00, 0x04, 0]);
        d.extend([6, 0x30, 15, 0, 0, 0]);
        let n = d.len() as u16;
        d[2..4].copy_from_slice(&n.to_le_bytes());
        let cfg = parse_config(&d).unwrap();
        let ep = cfg.interfaces[0].endpoints[0];
        assert_eq!((ep.max_packet, ep.max_burst), (1024, Some(15)));
        let p = find_bulk_pipes(&cfg, PipeRequest::default()).unwrap();
        assert!(p.bulk_out.is_none());
    }

    #[test]
    fn explicit_endpoints_are_checked() {
        let cfg = parse_config(&sourcesink_hs()).unwrap();
        let req = PipeRequest {
            ep_in: Some(0x01),
            ..Default::default()
        };
        let e = find_bulk_pipes(&cfg, req).unwrap_err().to_string();
        assert!(e.contains("not a bulk IN endpoint"), "{e}");
        let req = PipeRequest {
            ep_in: Some(0x85),
            ..Default::default()
        };
        assert!(find_bulk_pipes(&cfg, req)
            .unwrap_err()
            .to_string()
            .contains("no endpoint 0x85"));
        let req = PipeRequest {
            interface: Some(3),
            ..Default::default()
        };
        assert!(find_bulk_pipes(&cfg, req)
            .unwrap_err()
            .to_string()
            .contains("no interface 3"));
    }

    #[test]
    fn truncated_descriptors_are_errors_not_panics() {
        let d = sourcesink_hs();
        for cut in 0..d.len() {
            let mut t = d[..cut].to_vec();
            if t.len() >= 4 {
                let n = t.len() as u16;
                t[2..4].copy_from_slice(&n.to_le_bytes());
            }
            let _ = parse_config(&t);
        }
        let mut bad = d.clone();
        bad[9] = 200; // interface descriptor claims 200 bytes
        assert!(parse_config(&bad)
            .unwrap_err()
            .to_string()
            .contains("past the end"));
    }
}
