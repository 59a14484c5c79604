//! Controller profiles: the named host and device controllers of
//! `profiles.toml` (data, each number with its source), resolved into the
//! tick-valued parameters the bus simulation runs on.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::wire::{ticks, Phy, Speed};

/// The profiles xferlab ships, with the source of every number.
pub const BUILTIN: &str = include_str!("profiles.toml");

/// Why a profile cannot be used.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ProfileError {
    #[error("unknown USB model profile `{name}`; known: {known} (or HOST+DEVICE, hosts: {hosts}; devices: {devices})")]
    Unknown {
        name: String,
        known: String,
        hosts: String,
        devices: String,
    },
    #[error("USB model profiles: {0}")]
    Parse(String),
}

/// A host controller as the profiles file describes it.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    pub description: String,
    pub speed: Speed,
    pub transaction_gap_us: f64,
    pub nak_gap_us: f64,
    pub queued_gap_us: f64,
    pub irq_interval_us: f64,
    pub resubmit_us: f64,
}

/// When a device controller moves OUT data into memory.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum OutDma {
    /// Once per request (its cost is part of the request turnaround).
    Transfer,
    /// Once per OUT packet; the device refuses the next packet meanwhile.
    Transaction,
}

/// A device controller and the software feeding it.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    pub description: String,
    pub speed: Speed,
    pub depth: u32,
    pub latency_us: f64,
    pub out_dma: OutDma,
    pub dma_us: f64,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProfileSpec {
    pub description: String,
    pub host: String,
    pub device: String,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct BusSpec {
    bit_stuffing: f64,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct TtSpec {
    buffers: u32,
}

/// The whole profiles file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Profiles {
    bus: BusSpec,
    pub host: BTreeMap<String, HostSpec>,
    pub device: BTreeMap<String, DeviceSpec>,
    pub profile: BTreeMap<String, ProfileSpec>,
    tt: TtSpec,
}

impl Profiles {
    pub fn parse(text: &str) -> Result<Profiles, ProfileError> {
        toml::from_str(text).map_err(|e| ProfileError::Parse(e.to_string()))
    }

    /// The profiles xferlab ships.
    pub fn builtin() -> Profiles {
        Profiles::parse(BUILTIN).expect("profiles.toml parses (a unit test checks it)")
    }

    /// A named profile, or `HOST+DEVICE` naming the two controllers.
    pub fn resolve(&self, name: &str) -> Result<Profile, ProfileError> {
        let (h, d) = match self.profile.get(name) {
            Some(p) => (p.host.as_str(), p.device.as_str()),
            None => name.split_once('+').unwrap_or((name, "")),
        };
        match (self.host.get(h), self.device.get(d)) {
            (Some(host), Some(device)) => Ok(self.build(name, host, device)),
            _ => Err(ProfileError::Unknown {
                name: name.to_string(),
                known: join(self.profile.keys()),
                hosts: join(self.host.keys()),
                devices: join(self.device.keys()),
            }),
        }
    }

    fn build(&self, name: &str, host: &HostSpec, device: &DeviceSpec) -> Profile {
        let stuffing = self.bus.bit_stuffing;
        // A device runs at the lower of the two speeds; a full-speed device
        // on a high-speed host sits behind a hub's transaction translator
        // (an EHCI root port hands full-speed devices to a companion
        // controller instead, which is the full-speed host's profile).
        let (segment, tt) = match (host.speed, device.speed) {
            (Speed::High, Speed::Full) => (
                Speed::Full,
                Some(Tt {
                    buffers: self.tt.buffers.max(1),
                    hs: Phy::new(Speed::High, stuffing),
                }),
            ),
            (Speed::High, Speed::High) => (Speed::High, None),
            (Speed::Full, _) => (Speed::Full, None),
        };
        Profile {
            name: name.to_string(),
            phy: Phy::new(segment, stuffing),
            host: Host {
                transaction_gap: ticks(host.transaction_gap_us),
                nak_gap: ticks(host.nak_gap_us),
                queued_gap: ticks(host.queued_gap_us),
                irq_interval: ticks(host.irq_interval_us),
                resubmit: ticks(host.resubmit_us),
            },
            device: Device {
                depth: device.depth.max(1),
                latency: ticks(device.latency_us),
                out_dma_per_packet: match device.out_dma {
                    OutDma::Transfer => None,
                    OutDma::Transaction => Some(ticks(device.dma_us)),
                },
                dma_per_transfer: match device.out_dma {
                    OutDma::Transfer => ticks(device.dma_us),
                    OutDma::Transaction => 0,
                },
            },
            tt,
            host_spec: host.clone(),
            device_spec: device.clone(),
        }
    }
}

fn join<'a>(names: impl Iterator<Item = &'a String>) -> String {
    names.map(String::as_str).collect::<Vec<_>>().join(", ")
}

/// The host controller and its driver stack, in ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host {
    pub transaction_gap: u64,
    pub nak_gap: u64,
    pub queued_gap: u64,
    /// Completions reach software at multiples of this (0: at once).
    pub irq_interval: u64,
    /// Interrupt to the transfer submitted again.
    pub resubmit: u64,
}

/// The device controller and its software, in ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Device {
    pub depth: u32,
    pub latency: u64,
    /// DMA per OUT packet (musb); None: per request.
    pub out_dma_per_packet: Option<u64>,
    /// DMA set-up per request, added to the turnaround (per-request DMA).
    pub dma_per_transfer: u64,
}

/// A hub's transaction translator between a high-speed host and a
/// full-speed device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tt {
    pub buffers: u32,
    /// The high-speed side the split transactions run on.
    pub hs: Phy,
}

/// One resolved profile: what the simulation runs on.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub name: String,
    /// The segment the device's transactions run on.
    pub phy: Phy,
    pub host: Host,
    pub device: Device,
    pub tt: Option<Tt>,
    pub host_spec: HostSpec,
    pub device_spec: DeviceSpec,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_profiles_parse_and_every_profile_resolves() {
        let p = Profiles::builtin();
        for name in p.profile.keys() {
            p.resolve(name).unwrap();
        }
        assert_eq!(p.resolve("ehci+musb").unwrap().device.depth, 32);
        assert!(p.resolve("mcu-fs-hub").unwrap().tt.is_some());
        assert!(p.resolve("mcu-fs").unwrap().tt.is_none());
    }

    #[test]
    fn unknown_names_list_what_exists() {
        let e = Profiles::builtin().resolve("xhci").unwrap_err().to_string();
        assert!(e.contains("unknown USB model profile `xhci`"), "{e}");
        assert!(e.contains("study4"), "{e}");
        assert!(e.contains("ffs-sync"), "{e}");
    }
}
