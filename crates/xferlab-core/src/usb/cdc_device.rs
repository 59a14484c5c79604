//! A CDC network device answering its host, sans-IO: what a user-space
//! gadget that owns ep0 (Linux's raw-gadget, drivers/usb/gadget/legacy/
//! raw_gadget.c) announces and replies so that the host's own class
//! driver binds it: cdc_ether for ECM, cdc_ncm for NCM, cdc_eem for EEM.
//! FunctionFS cannot do this for ECM and NCM: it refuses the CDC
//! functional descriptors (see [`super::ffs`]).
//!
//! The layout follows Linux's f_ecm and f_ncm (CDC ECM 1.2 and NCM 1.0):
//! a communication interface (header, union, Ethernet networking and,
//! for NCM, NCM functional descriptors; an interrupt IN endpoint for
//! notifications) and a data interface whose alternate setting 0 has no
//! endpoints and 1 has the bulk pair; the host selects 1 to start the
//! link. EEM is one interface with the bulk pair. The device reports
//! the link up with a CONNECTION_SPEED_CHANGE and a NETWORK_CONNECTION
//! notification (cdc_ether and cdc_ncm keep the carrier off until then).
//!
//! [`CdcDevice::setup`] maps each SETUP packet to a [`Reply`] (what ep0
//! does: send bytes, accept a data stage, acknowledge, stall) and a
//! [`Change`] of the device's state for the driver to act on (enable
//! endpoints). No clock and no I/O.

use super::descriptor::{DT_CONFIG, DT_DEVICE, DT_ENDPOINT, DT_INTERFACE, EP_DIR_IN, XFER_BULK};
use super::net::ncm::{NtbParameters, NtbParams};
use super::net::Encap;

const DT_STRING: u8 = 3;
const DT_DEVICE_QUALIFIER: u8 = 6;
const DT_OTHER_SPEED_CONFIG: u8 = 7;
const DT_CS_INTERFACE: u8 = 0x24;
const XFER_INT: u8 = 3;

const CLASS_COMM: u8 = 0x02;
const CLASS_CDC_DATA: u8 = 0x0a;
const SUBCLASS_ECM: u8 = 0x06;
const SUBCLASS_EEM: u8 = 0x0c;
const SUBCLASS_NCM: u8 = 0x0d;
const PROTO_EEM: u8 = 0x07;
/// The NCM data interface's protocol: "network transfer block".
const PROTO_NTB: u8 = 0x01;

const CDC_HEADER: u8 = 0x00;
const CDC_UNION: u8 = 0x06;
const CDC_ETHERNET: u8 = 0x0f;
const CDC_NCM: u8 = 0x1a;

// Standard requests.
const GET_STATUS: u8 = 0x00;
const GET_DESCRIPTOR: u8 = 0x06;
const GET_CONFIGURATION: u8 = 0x08;
const SET_CONFIGURATION: u8 = 0x09;
const GET_INTERFACE: u8 = 0x0a;
const SET_INTERFACE: u8 = 0x0b;
// CDC class requests (ECM 1.2 table 6, NCM 1.0 table 6-2).
const SET_ETHERNET_PACKET_FILTER: u8 = 0x43;
const GET_NTB_PARAMETERS: u8 = 0x80;
const GET_NTB_FORMAT: u8 = 0x83;
const SET_NTB_FORMAT: u8 = 0x84;
const GET_NTB_INPUT_SIZE: u8 = 0x85;
const SET_NTB_INPUT_SIZE: u8 = 0x86;
const GET_CRC_MODE: u8 = 0x89;
const SET_CRC_MODE: u8 = 0x8a;

const NOTIFY_NETWORK_CONNECTION: u8 = 0x00;
const NOTIFY_SPEED_CHANGE: u8 = 0x2a;

/// The communication interface; the data interface is 1.
const COMM_INTERFACE: u8 = 0;
const DATA_INTERFACE: u8 = 1;
/// String indices.
const S_MANUFACTURER: u8 = 1;
const S_PRODUCT: u8 = 2;
const S_SERIAL: u8 = 3;
const S_MAC: u8 = 4;
/// Notification endpoint: f_ecm's and f_ncm's 16 bytes (a speed change).
const NOTIFY_MAX_PACKET: u16 = 16;
/// bInterval at high speed: 2^(9-1) microframes = 32 ms (f_ncm's).
const NOTIFY_INTERVAL_HS: u8 = 9;
/// 100 mA, in the descriptor's 2 mA units.
pub const MAX_POWER_2MA: u8 = 50;
/// The smallest NTB a host may ask the device to send (NCM 1.0, 6.2.7).
const NTB_MIN_IN_SIZE: u32 = 2048;
/// The Ethernet networking descriptor's wMaxSegmentSize: an untagged
/// 1500-byte MTU frame, as f_ecm and f_ncm announce.
const MAX_SEGMENT: u16 = 1514;

/// A SETUP packet (USB 2.0, 9.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setup {
    pub request_type: u8,
    pub request: u8,
    pub value: u16,
    pub index: u16,
    pub length: u16,
}

impl Setup {
    pub fn parse(b: &[u8]) -> Option<Setup> {
        let b: &[u8; 8] = b.get(..8)?.try_into().ok()?;
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        Some(Setup {
            request_type: b[0],
            request: b[1],
            value: u16_at(2),
            index: u16_at(4),
            length: u16_at(6),
        })
    }

    fn is_in(&self) -> bool {
        self.request_type & EP_DIR_IN != 0
    }

    /// Standard (0), class (1) or vendor (2).
    fn kind(&self) -> u8 {
        (self.request_type >> 5) & 3
    }
}

/// What ep0 does with a SETUP packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// An IN data stage with these bytes (already cut to wLength).
    Send(Vec<u8>),
    /// An OUT data stage of this many bytes, for [`CdcDevice::data_out`];
    /// 0: no data stage, just the status stage.
    Receive(u16),
    /// A request this device does not support.
    Stall,
}

/// A change of the device's state the driver acts on before it replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// SET_CONFIGURATION: 0 deconfigures, 1 configures (the notification
    /// endpoint, and for EEM the bulk pair, become usable).
    Configuration(u8),
    /// SET_INTERFACE on the data interface: alternate setting 1 carries
    /// the bulk pair (ECM, NCM).
    DataAlt(u8),
}

/// The endpoints the driver enables, as descriptors (raw-gadget's
/// EP_ENABLE takes the 9-byte form: these 7 bytes and two zeros).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoints {
    pub bulk_in: [u8; 7],
    pub bulk_out: [u8; 7],
    /// ECM and NCM only.
    pub notify: Option<[u8; 7]>,
}

/// Who the device says it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub vid: u16,
    pub pid: u16,
    pub serial: String,
    /// The address the host's interface takes (iMACAddress).
    pub host_mac: [u8; 6],
}

#[derive(Debug, Clone)]
pub struct CdcDevice {
    encap: Encap,
    id: Identity,
    /// Bulk endpoint addresses (IN has bit 7 set).
    ep_in: u8,
    ep_out: u8,
    ep_notify: u8,
    ntb: NtbParameters,
    configuration: u8,
    data_alt: u8,
    /// NCM: the largest NTB the host takes (SET_NTB_INPUT_SIZE).
    ntb_in_max: u32,
    /// SET_ETHERNET_PACKET_FILTER's last bitmap.
    pub packet_filter: u16,
}

impl CdcDevice {
    /// A device speaking `encap` on bulk endpoints `ep_in` (IN, 0x8N) and
    /// `ep_out`, notifying on `ep_notify` (IN) for ECM and NCM.
    pub fn new(encap: Encap, id: Identity, ep_in: u8, ep_out: u8, ep_notify: u8) -> CdcDevice {
        let p = NtbParams::LINUX_GADGET;
        CdcDevice {
            encap,
            id,
            ep_in: ep_in | EP_DIR_IN,
            ep_out: ep_out & !EP_DIR_IN,
            ep_notify: ep_notify | EP_DIR_IN,
            // NTB16 only; f_ncm's sizes and alignment both ways.
            ntb: NtbParameters {
                formats: 1,
                host_in: p,
                host_out: p,
            },
            configuration: 0,
            data_alt: 0,
            ntb_in_max: p.max_size as u32,
            packet_filter: 0,
        }
    }

    pub fn encap(&self) -> Encap {
        self.encap
    }

    /// The largest NTB the host takes now (NCM).
    pub fn ntb_in_max(&self) -> usize {
        self.ntb_in_max as usize
    }

    /// What the device announced for NTBs in both directions.
    pub fn ntb_parameters(&self) -> NtbParameters {
        self.ntb
    }

    /// The link carries data: configured, and (ECM, NCM) the data
    /// interface at its alternate setting 1.
    pub fn data_ready(&self) -> bool {
        self.configuration == 1 && (self.encap == Encap::Eem || self.data_alt == 1)
    }

    /// The endpoints at high speed (512-byte bulk packets).
    pub fn endpoints(&self) -> Endpoints {
        self.endpoints_at(512)
    }

    fn endpoints_at(&self, bulk_packet: u16) -> Endpoints {
        let ep = |addr: u8, kind: u8, mp: u16, interval: u8| {
            let m = mp.to_le_bytes();
            [7, DT_ENDPOINT, addr, kind, m[0], m[1], interval]
        };
        let interval = if bulk_packet == 512 {
            NOTIFY_INTERVAL_HS
        } else {
            // Full speed: in frames (ms), f_ncm's 32.
            32
        };
        Endpoints {
            bulk_in: ep(self.ep_in, XFER_BULK, bulk_packet, 0),
            bulk_out: ep(self.ep_out, XFER_BULK, bulk_packet, 0),
            notify: (self.encap != Encap::Eem)
                .then(|| ep(self.ep_notify, XFER_INT, NOTIFY_MAX_PACKET, interval)),
        }
    }

    pub fn device_descriptor(&self) -> [u8; 18] {
        let (v, p) = (self.id.vid.to_le_bytes(), self.id.pid.to_le_bytes());
        [
            18,
            DT_DEVICE,
            0x00,
            0x02, // bcdUSB 2.00
            CLASS_COMM,
            0,
            0,
            64, // bMaxPacketSize0
            v[0],
            v[1],
            p[0],
            p[1],
            0x00,
            0x01, // bcdDevice 1.00
            S_MANUFACTURER,
            S_PRODUCT,
            S_SERIAL,
            1, // bNumConfigurations
        ]
    }

    /// The device qualifier: what the device would be at the other speed.
    fn qualifier(&self) -> [u8; 10] {
        let d = self.device_descriptor();
        [
            10,
            DT_DEVICE_QUALIFIER,
            d[2],
            d[3],
            d[4],
            d[5],
            d[6],
            d[7],
            1,
            0,
        ]
    }

    /// The configuration descriptor with everything under it, at high
    /// speed (512) or full speed (64); `kind` is DT_CONFIG or
    /// DT_OTHER_SPEED_CONFIG.
    pub fn configuration_descriptor(&self, bulk_packet: u16, kind: u8) -> Vec<u8> {
        let eps = self.endpoints_at(bulk_packet);
        let interface = |number: u8, alt: u8, n_eps: u8, class: [u8; 3]| {
            [
                9,
                DT_INTERFACE,
                number,
                alt,
                n_eps,
                class[0],
                class[1],
                class[2],
                0,
            ]
        };
        let mut b = vec![9, kind, 0, 0, 0, 1, 0, 0x80, MAX_POWER_2MA];
        match self.encap {
            Encap::Eem => {
                b.extend(interface(0, 0, 2, [CLASS_COMM, SUBCLASS_EEM, PROTO_EEM]));
                b.extend(eps.bulk_in);
                b.extend(eps.bulk_out);
                b[4] = 1;
            }
            Encap::Ecm | Encap::Ncm => {
                let ncm = self.encap == Encap::Ncm;
                let sub = if ncm { SUBCLASS_NCM } else { SUBCLASS_ECM };
                b.extend(interface(COMM_INTERFACE, 0, 1, [CLASS_COMM, sub, 0]));
                b.extend([5, DT_CS_INTERFACE, CDC_HEADER, 0x10, 0x01]);
                b.extend([
                    5,
                    DT_CS_INTERFACE,
                    CDC_UNION,
                    COMM_INTERFACE,
                    DATA_INTERFACE,
                ]);
                let seg = MAX_SEGMENT.to_le_bytes();
                b.extend([
                    13,
                    DT_CS_INTERFACE,
                    CDC_ETHERNET,
                    S_MAC,
                    0,
                    0,
                    0,
                    0, // bmEthernetStatistics: none
                    seg[0],
                    seg[1],
                    0,
                    0, // wNumberMCFilters
                    0, // bNumberPowerFilters
                ]);
                if ncm {
                    // NCM 1.00; bmNetworkCapabilities: packet filter only
                    // (no CRC mode, no NetAddress, no max datagram size
                    // requests: the host then sends none of them).
                    b.extend([6, DT_CS_INTERFACE, CDC_NCM, 0x00, 0x01, 0x01]);
                }
                b.extend(eps.notify.unwrap_or_default());
                let data_proto = if ncm { PROTO_NTB } else { 0 };
                b.extend(interface(
                    DATA_INTERFACE,
                    0,
                    0,
                    [CLASS_CDC_DATA, 0, data_proto],
                ));
                b.extend(interface(
                    DATA_INTERFACE,
                    1,
                    2,
                    [CLASS_CDC_DATA, 0, data_proto],
                ));
                b.extend(eps.bulk_in);
                b.extend(eps.bulk_out);
                b[4] = 2;
            }
        }
        let total = (b.len() as u16).to_le_bytes();
        b[2] = total[0];
        b[3] = total[1];
        b
    }

    fn string(&self, index: u8) -> Option<Vec<u8>> {
        let text = match index {
            0 => return Some(vec![4, DT_STRING, 0x09, 0x04]), // en-US
            S_MANUFACTURER => "xferlab".to_string(),
            S_PRODUCT => format!(
                "xferlab CDC-{} link (raw-gadget)",
                self.encap.label().to_uppercase()
            ),
            S_SERIAL => self.id.serial.clone(),
            S_MAC if self.encap != Encap::Eem => self
                .id
                .host_mac
                .iter()
                .map(|b| format!("{b:02X}"))
                .collect(),
            _ => return None,
        };
        // At most 126 UTF-16 units fit in bLength's 255 bytes.
        let units: Vec<u16> = text.encode_utf16().take(126).collect();
        let mut b = vec![(2 + 2 * units.len()) as u8, DT_STRING];
        for u in units {
            b.extend(u.to_le_bytes());
        }
        Some(b)
    }

    /// The interrupt transfers that report the link up, in order:
    /// CONNECTION_SPEED_CHANGE (480 Mbit/s both ways, as f_ncm says at
    /// high speed) then NETWORK_CONNECTION. None for EEM.
    pub fn link_up_notifications(&self) -> Option<[Vec<u8>; 2]> {
        if self.encap == Encap::Eem {
            return None;
        }
        let head = |code: u8, value: u16, len: u16| {
            let (v, i, l) = (
                value.to_le_bytes(),
                u16::from(COMM_INTERFACE).to_le_bytes(),
                len.to_le_bytes(),
            );
            vec![0xa1, code, v[0], v[1], i[0], i[1], l[0], l[1]]
        };
        let mut speed = head(NOTIFY_SPEED_CHANGE, 0, 8);
        let bps = 480_000_000u32.to_le_bytes();
        speed.extend(bps);
        speed.extend(bps);
        Some([speed, head(NOTIFY_NETWORK_CONNECTION, 1, 0)])
    }

    /// What to do with a SETUP packet, and how the device changes.
    pub fn setup(&mut self, s: &Setup) -> (Reply, Option<Change>) {
        let send = |mut b: Vec<u8>| {
            b.truncate(usize::from(s.length));
            (Reply::Send(b), None)
        };
        let stall = (Reply::Stall, None);
        match (s.kind(), s.is_in(), s.request) {
            (0, true, GET_DESCRIPTOR) => {
                let [index, kind] = s.value.to_le_bytes();
                match kind {
                    DT_DEVICE => send(self.device_descriptor().to_vec()),
                    DT_CONFIG => send(self.configuration_descriptor(512, DT_CONFIG)),
                    DT_OTHER_SPEED_CONFIG => {
                        send(self.configuration_descriptor(64, DT_OTHER_SPEED_CONFIG))
                    }
                    DT_DEVICE_QUALIFIER => send(self.qualifier().to_vec()),
                    DT_STRING => self.string(index).map_or(stall, send),
                    _ => stall,
                }
            }
            (0, true, GET_CONFIGURATION) => send(vec![self.configuration]),
            (0, true, GET_STATUS) => send(vec![0, 0]),
            (0, false, SET_CONFIGURATION) => match s.value {
                0 | 1 => {
                    self.configuration = s.value as u8;
                    self.data_alt = 0;
                    (
                        Reply::Receive(0),
                        Some(Change::Configuration(s.value as u8)),
                    )
                }
                _ => stall,
            },
            (0, true, GET_INTERFACE) if self.configuration == 1 => match s.index {
                i if i == u16::from(DATA_INTERFACE) && self.encap != Encap::Eem => {
                    send(vec![self.data_alt])
                }
                0 => send(vec![0]),
                _ => stall,
            },
            (0, false, SET_INTERFACE) if self.configuration == 1 => {
                match (s.index, s.value, self.encap) {
                    (0, 0, _) => (Reply::Receive(0), None),
                    (i, alt @ (0 | 1), Encap::Ecm | Encap::Ncm)
                        if i == u16::from(DATA_INTERFACE) =>
                    {
                        self.data_alt = alt as u8;
                        (Reply::Receive(0), Some(Change::DataAlt(alt as u8)))
                    }
                    _ => stall,
                }
            }
            (1, false, SET_ETHERNET_PACKET_FILTER) if self.encap != Encap::Eem => {
                self.packet_filter = s.value;
                (Reply::Receive(0), None)
            }
            (1, dir, req) if self.encap == Encap::Ncm => self.ncm_request(s, dir, req),
            _ => stall,
        }
    }

    fn ncm_request(&mut self, s: &Setup, is_in: bool, request: u8) -> (Reply, Option<Change>) {
        let send = |mut b: Vec<u8>| {
            b.truncate(usize::from(s.length));
            (Reply::Send(b), None)
        };
        match (is_in, request) {
            (true, GET_NTB_PARAMETERS) => send(self.ntb.to_bytes().to_vec()),
            // NTB16 is the only format, CRC mode the only "no CRC".
            (true, GET_NTB_FORMAT) | (true, GET_CRC_MODE) => send(vec![0, 0]),
            (false, SET_NTB_FORMAT) | (false, SET_CRC_MODE) if s.value == 0 => {
                (Reply::Receive(0), None)
            }
            (true, GET_NTB_INPUT_SIZE) => send(self.ntb_in_max.to_le_bytes().to_vec()),
            // dwNtbInMaxSize, and with 8 bytes wNtbInMaxDatagrams too.
            (false, SET_NTB_INPUT_SIZE) if s.length == 4 || s.length == 8 => {
                (Reply::Receive(s.length), None)
            }
            _ => (Reply::Stall, None),
        }
    }

    /// An OUT data stage the device asked for with [`Reply::Receive`].
    pub fn data_out(&mut self, s: &Setup, data: &[u8]) {
        if s.kind() == 1 && s.request == SET_NTB_INPUT_SIZE && self.encap == Encap::Ncm {
            if let Some(b) = data.get(..4) {
                let v = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                // A host may shrink what it takes, never grow it past
                // what was announced, nor below the specification's floor.
                self.ntb_in_max = v.clamp(NTB_MIN_IN_SIZE, self.ntb.host_in.max_size as u32);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usb::descriptor::parse_config;

    fn id() -> Identity {
        Identity {
            vid: 0x1d6b,
            pid: 0x0104,
            serial: "x-1".into(),
            host_mac: [0x02, 0x58, 0x46, 0, 0, 1],
        }
    }

    fn dev(e: Encap) -> CdcDevice {
        CdcDevice::new(e, id(), 1, 2, 3)
    }

    fn setup(request_type: u8, request: u8, value: u16, index: u16, length: u16) -> Setup {
        Setup {
            request_type,
            request,
            value,
            index,
            length,
        }
    }

    fn get_descriptor(d: &mut CdcDevice, kind: u8, index: u8, length: u16) -> Vec<u8> {
        match d.setup(&setup(
            0x80,
            GET_DESCRIPTOR,
            u16::from(kind) << 8 | u16::from(index),
            0,
            length,
        )) {
            (Reply::Send(b), None) => b,
            other => panic!("{other:?}"),
        }
    }

    /// The functional descriptors (type, subtype) between the first
    /// interface descriptor and the next one.
    fn functional(cfg: &[u8]) -> Vec<(u8, u8)> {
        let mut out = Vec::new();
        let mut i = 9;
        let mut interfaces = 0;
        while i + 2 <= cfg.len() {
            let (len, kind) = (usize::from(cfg[i]), cfg[i + 1]);
            assert!(
                len >= 2 && i + len <= cfg.len(),
                "descriptor at {i} overruns"
            );
            if kind == DT_INTERFACE {
                interfaces += 1;
            } else if kind == DT_CS_INTERFACE && interfaces == 1 {
                out.push((kind, cfg[i + 2]));
            }
            i += len;
        }
        assert_eq!(i, cfg.len());
        out
    }

    #[test]
    fn ncm_configuration_parses_and_carries_the_functional_descriptors_cdc_ncm_needs() {
        let mut d = dev(Encap::Ncm);
        let cfg = get_descriptor(&mut d, DT_CONFIG, 0, 4096);
        assert_eq!(usize::from(u16::from_le_bytes([cfg[2], cfg[3]])), cfg.len());
        assert_eq!(cfg[4], 2, "two interfaces");
        let c = parse_config(&cfg).expect("parses");
        let data: Vec<_> = c.interfaces.iter().filter(|i| i.number == 1).collect();
        assert_eq!(data.len(), 2, "data interface alt 0 and 1");
        assert!(data[0].endpoints.is_empty());
        assert_eq!(data[1].alt, 1);
        assert_eq!(
            (data[1].class, data[1].protocol),
            (CLASS_CDC_DATA, PROTO_NTB)
        );
        let eps = &data[1].endpoints;
        assert!(eps
            .iter()
            .any(|e| e.is_in() && e.is_bulk() && e.max_packet == 512));
        assert!(eps
            .iter()
            .any(|e| !e.is_in() && e.is_bulk() && e.max_packet == 512));
        let comm = c.interfaces.iter().find(|i| i.number == 0).unwrap();
        assert_eq!((comm.class, comm.subclass), (CLASS_COMM, SUBCLASS_NCM));
        assert_eq!(comm.endpoints.len(), 1);
        assert_eq!(comm.endpoints[0].attributes & 3, XFER_INT);
        assert_eq!(
            functional(&cfg),
            vec![
                (DT_CS_INTERFACE, CDC_HEADER),
                (DT_CS_INTERFACE, CDC_UNION),
                (DT_CS_INTERFACE, CDC_ETHERNET),
                (DT_CS_INTERFACE, CDC_NCM)
            ]
        );
        // Full speed for OTHER_SPEED_CONFIG: 64-byte bulk packets.
        let other = get_descriptor(&mut d, DT_OTHER_SPEED_CONFIG, 0, 4096);
        assert_eq!(other[1], DT_OTHER_SPEED_CONFIG);
        let o = parse_config(&{
            let mut b = other.clone();
            b[1] = DT_CONFIG;
            b
        })
        .unwrap();
        assert!(o
            .interfaces
            .iter()
            .flat_map(|i| &i.endpoints)
            .filter(|e| e.is_bulk())
            .all(|e| e.max_packet == 64));
    }

    #[test]
    fn ecm_has_no_ncm_descriptor_and_eem_is_one_interface() {
        let mut d = dev(Encap::Ecm);
        let cfg = get_descriptor(&mut d, DT_CONFIG, 0, 4096);
        assert_eq!(functional(&cfg).len(), 3);
        let c = parse_config(&cfg).unwrap();
        assert_eq!(c.interfaces[0].subclass, SUBCLASS_ECM);
        assert!(c
            .interfaces
            .iter()
            .filter(|i| i.number == 1)
            .all(|i| i.protocol == 0));

        let mut e = dev(Encap::Eem);
        let cfg = get_descriptor(&mut e, DT_CONFIG, 0, 4096);
        let c = parse_config(&cfg).unwrap();
        assert_eq!(c.interfaces.len(), 1);
        let i = &c.interfaces[0];
        assert_eq!(
            [i.class, i.subclass, i.protocol],
            [CLASS_COMM, SUBCLASS_EEM, PROTO_EEM]
        );
        assert_eq!(i.endpoints.len(), 2);
        assert!(e.link_up_notifications().is_none());
        assert!(e.endpoints().notify.is_none());
    }

    #[test]
    fn descriptors_are_cut_to_wlength_and_strings_carry_the_mac() {
        let mut d = dev(Encap::Ncm);
        // Linux asks for the configuration's first 9 bytes first.
        assert_eq!(get_descriptor(&mut d, DT_CONFIG, 0, 9).len(), 9);
        let dd = get_descriptor(&mut d, DT_DEVICE, 0, 64);
        assert_eq!(dd.len(), 18);
        assert_eq!(&dd[8..12], &[0x6b, 0x1d, 0x04, 0x01]);
        assert_eq!(
            get_descriptor(&mut d, DT_STRING, 0, 255),
            vec![4, DT_STRING, 9, 4]
        );
        let mac = get_descriptor(&mut d, DT_STRING, S_MAC, 255);
        let text: String = mac[2..].chunks(2).map(|c| char::from(c[0])).collect();
        assert_eq!(text, "025846000001");
        assert_eq!(usize::from(mac[0]), mac.len());
        assert!(matches!(
            d.setup(&setup(0x80, GET_DESCRIPTOR, 0x0309, 0, 255)),
            (Reply::Stall, None)
        ));
        assert_eq!(get_descriptor(&mut d, DT_DEVICE_QUALIFIER, 0, 10).len(), 10);
    }

    #[test]
    fn configuration_then_alt_setting_one_makes_the_data_path_ready() {
        let mut d = dev(Encap::Ncm);
        assert!(!d.data_ready());
        // SET_INTERFACE before SET_CONFIGURATION is refused.
        assert_eq!(
            d.setup(&setup(0x01, SET_INTERFACE, 1, 1, 0)).0,
            Reply::Stall
        );
        assert_eq!(
            d.setup(&setup(0x00, SET_CONFIGURATION, 1, 0, 0)),
            (Reply::Receive(0), Some(Change::Configuration(1)))
        );
        assert!(!d.data_ready());
        assert_eq!(
            d.setup(&setup(0x01, SET_INTERFACE, 1, 1, 0)),
            (Reply::Receive(0), Some(Change::DataAlt(1)))
        );
        assert!(d.data_ready());
        assert_eq!(
            d.setup(&setup(0x81, GET_INTERFACE, 0, 1, 1)).0,
            Reply::Send(vec![1])
        );
        assert_eq!(
            d.setup(&setup(0x01, SET_INTERFACE, 2, 1, 0)).0,
            Reply::Stall
        );
        assert_eq!(
            d.setup(&setup(0x00, SET_CONFIGURATION, 2, 0, 0)).0,
            Reply::Stall
        );
        d.setup(&setup(0x00, SET_CONFIGURATION, 0, 0, 0));
        assert!(!d.data_ready());
        // EEM needs no alternate setting.
        let mut e = dev(Encap::Eem);
        e.setup(&setup(0x00, SET_CONFIGURATION, 1, 0, 0));
        assert!(e.data_ready());
    }

    #[test]
    fn ncm_class_requests_answer_as_f_ncm_and_refuse_what_is_not_announced() {
        let mut d = dev(Encap::Ncm);
        let (r, _) = d.setup(&setup(0xa1, GET_NTB_PARAMETERS, 0, 0, 28));
        let Reply::Send(b) = r else { panic!("{r:?}") };
        let p = NtbParameters::parse(&b).unwrap();
        assert_eq!(p.formats, 1);
        assert_eq!(p.host_in, NtbParams::LINUX_GADGET);
        // The host shrinks the NTBs it takes: honoured, within bounds.
        let s = setup(0x21, SET_NTB_INPUT_SIZE, 0, 0, 4);
        assert_eq!(d.setup(&s).0, Reply::Receive(4));
        d.data_out(&s, &8192u32.to_le_bytes());
        assert_eq!(d.ntb_in_max(), 8192);
        d.data_out(&s, &1u32.to_le_bytes());
        assert_eq!(d.ntb_in_max(), 2048);
        d.data_out(&s, &1_000_000u32.to_le_bytes());
        assert_eq!(d.ntb_in_max(), 16384);
        d.data_out(&s, &[1, 2]);
        assert_eq!(d.ntb_in_max(), 16384, "a short data stage changes nothing");
        assert_eq!(
            d.setup(&setup(0x21, SET_NTB_INPUT_SIZE, 0, 0, 3)).0,
            Reply::Stall
        );
        // NTB32 and CRC mode are not offered.
        assert_eq!(
            d.setup(&setup(0x21, SET_NTB_FORMAT, 1, 0, 0)).0,
            Reply::Stall
        );
        assert_eq!(
            d.setup(&setup(0x21, SET_NTB_FORMAT, 0, 0, 0)).0,
            Reply::Receive(0)
        );
        assert_eq!(d.setup(&setup(0x21, SET_CRC_MODE, 1, 0, 0)).0, Reply::Stall);
        assert_eq!(
            d.setup(&setup(0x21, SET_ETHERNET_PACKET_FILTER, 0x0e, 0, 0))
                .0,
            Reply::Receive(0)
        );
        assert_eq!(d.packet_filter, 0x0e);
        // Vendor requests and unknown class requests stall.
        assert_eq!(d.setup(&setup(0xc0, 0x01, 0, 0, 4)).0, Reply::Stall);
        assert_eq!(d.setup(&setup(0xa1, 0x87, 0, 0, 2)).0, Reply::Stall);
        // ECM has no NCM requests.
        let mut e = dev(Encap::Ecm);
        assert_eq!(
            e.setup(&setup(0xa1, GET_NTB_PARAMETERS, 0, 0, 28)).0,
            Reply::Stall
        );
    }

    #[test]
    fn link_up_is_a_speed_change_then_a_connection() {
        let d = dev(Encap::Ncm);
        let [speed, conn] = d.link_up_notifications().unwrap();
        assert_eq!(speed.len(), 16);
        assert_eq!(&speed[..2], &[0xa1, NOTIFY_SPEED_CHANGE]);
        assert_eq!(
            u32::from_le_bytes(speed[8..12].try_into().unwrap()),
            480_000_000
        );
        assert_eq!(
            conn,
            vec![0xa1, NOTIFY_NETWORK_CONNECTION, 1, 0, 0, 0, 0, 0]
        );
        assert!(speed.len() <= usize::from(NOTIFY_MAX_PACKET));
    }

    #[test]
    fn hostile_setup_packets_never_panic() {
        for e in Encap::ALL {
            let mut d = dev(e);
            for rt in [0x00u8, 0x01, 0x21, 0x80, 0x81, 0xa1, 0xc0, 0xff] {
                for req in 0..=255u8 {
                    for value in [
                        0u16, 1, 2, 0x0100, 0x0200, 0x0304, 0x03ff, 0x0600, 0x0700, 0xffff,
                    ] {
                        for length in [0u16, 1, 9, 0xffff] {
                            let s = setup(rt, req, value, value >> 8, length);
                            if let (Reply::Send(b), _) = d.setup(&s) {
                                assert!(b.len() <= usize::from(length));
                            }
                            d.data_out(&s, &[0xff; 9]);
                        }
                    }
                }
            }
        }
        assert_eq!(Setup::parse(&[0; 7]), None);
        assert_eq!(
            Setup::parse(&[0x80, 6, 0, 1, 0, 0, 18, 0]),
            Some(setup(0x80, 6, 0x0100, 0, 18))
        );
    }
}
