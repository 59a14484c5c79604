//! FunctionFS (drivers/usb/gadget/function/f_fs.c) as bytes: the
//! descriptor and string blobs a user-space function writes to ep0, and
//! the events it reads back. xferlab's gadget is one interface with one
//! bulk IN and one bulk OUT endpoint (ep1 and ep2 in the FunctionFS
//! mount), described for full, high and super speed: vendor-specific for
//! the source/sink, CDC-EEM for the network link (a class the host's
//! cdc_eem binds by its interface triple alone).
//!
//! FunctionFS refuses class-specific (CS_INTERFACE, 0x24) descriptors
//! other than HID's and CCID's (f_fs.c, ffs_do_single_desc, Linux 6.1), so
//! a FunctionFS function cannot carry the CDC header, union and Ethernet
//! functional descriptors that cdc_ether and cdc_ncm require: those
//! classes are served as vendor-specific interfaces here, and as real CDC
//! ones through raw-gadget ([`super::cdc_device`]).

use super::descriptor::{DT_ENDPOINT, DT_INTERFACE, DT_SS_ENDPOINT_COMP, XFER_BULK};

const DESCRIPTORS_MAGIC_V2: u32 = 3;
const STRINGS_MAGIC: u32 = 2;
const HAS_FS_DESC: u32 = 1;
const HAS_HS_DESC: u32 = 2;
const HAS_SS_DESC: u32 = 4;

/// ep1 of the FunctionFS mount: bulk IN (device to host).
pub const EP_IN_ADDR: u8 = 0x81;
/// ep2 of the FunctionFS mount: bulk OUT (host to device).
pub const EP_OUT_ADDR: u8 = 0x02;

/// bInterfaceClass, bInterfaceSubClass, bInterfaceProtocol.
pub type InterfaceClass = [u8; 3];

/// Vendor specific: only a program that claims the interface drives it.
pub const VENDOR_SPECIFIC: InterfaceClass = [0xff, 0, 0];
/// CDC (communications), subclass EEM (0x0c), protocol EEM (7): cdc_eem's
/// match (CDC EEM 1.0, section 5.1).
pub const CDC_EEM: InterfaceClass = [0x02, 0x0c, 0x07];

fn interface_desc(class: InterfaceClass) -> [u8; 9] {
    // bInterfaceNumber is rewritten by f_fs; iInterface = string 1.
    [9, DT_INTERFACE, 0, 0, 2, class[0], class[1], class[2], 1]
}

fn endpoint_desc(addr: u8, max_packet: u16) -> [u8; 7] {
    let mp = max_packet.to_le_bytes();
    [7, DT_ENDPOINT, addr, XFER_BULK, mp[0], mp[1], 0]
}

/// The v2 descriptor blob of a vendor-specific interface: FS (64 B
/// packets), HS (512 B) and SS (1024 B, bursts of `ss_max_burst + 1`
/// packets).
pub fn descriptors(ss_max_burst: u8) -> Vec<u8> {
    descriptors_for(VENDOR_SPECIFIC, ss_max_burst)
}

/// The same blob for an interface of `class`.
pub fn descriptors_for(class: InterfaceClass, ss_max_burst: u8) -> Vec<u8> {
    let interface_desc = || interface_desc(class);
    let mut fs = Vec::new();
    fs.extend(interface_desc());
    fs.extend(endpoint_desc(EP_IN_ADDR, 64));
    fs.extend(endpoint_desc(EP_OUT_ADDR, 64));
    let mut hs = Vec::new();
    hs.extend(interface_desc());
    hs.extend(endpoint_desc(EP_IN_ADDR, 512));
    hs.extend(endpoint_desc(EP_OUT_ADDR, 512));
    let comp = [6, DT_SS_ENDPOINT_COMP, ss_max_burst.min(15), 0, 0, 0];
    let mut ss = Vec::new();
    ss.extend(interface_desc());
    ss.extend(endpoint_desc(EP_IN_ADDR, 1024));
    ss.extend(comp);
    ss.extend(endpoint_desc(EP_OUT_ADDR, 1024));
    ss.extend(comp);
    let mut out = Vec::new();
    out.extend(DESCRIPTORS_MAGIC_V2.to_le_bytes());
    out.extend(0u32.to_le_bytes()); // length, patched below
    out.extend((HAS_FS_DESC | HAS_HS_DESC | HAS_SS_DESC).to_le_bytes());
    out.extend(3u32.to_le_bytes()); // fs_count
    out.extend(3u32.to_le_bytes()); // hs_count
    out.extend(5u32.to_le_bytes()); // ss_count
    out.extend(fs);
    out.extend(hs);
    out.extend(ss);
    let len = out.len() as u32;
    out[4..8].copy_from_slice(&len.to_le_bytes());
    out
}

/// The strings blob: one language (en-US), the interface name.
pub fn strings(interface_name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(STRINGS_MAGIC.to_le_bytes());
    out.extend(0u32.to_le_bytes());
    out.extend(1u32.to_le_bytes()); // str_count
    out.extend(1u32.to_le_bytes()); // lang_count
    out.extend(0x0409u16.to_le_bytes());
    out.extend(interface_name.as_bytes());
    out.push(0);
    let len = out.len() as u32;
    out[4..8].copy_from_slice(&len.to_le_bytes());
    out
}

/// struct usb_functionfs_event: 8 bytes of setup packet, a type, padding.
pub const EVENT_SIZE: usize = 12;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Bind,
    Unbind,
    /// The host selected a configuration with this function: endpoints work.
    Enable,
    /// Reset, disconnect or a configuration change: endpoints stop.
    Disable,
    /// A control request for the function (request type, request, value, index, length).
    Setup {
        request_type: u8,
        request: u8,
        value: u16,
        index: u16,
        length: u16,
    },
    Suspend,
    Resume,
    Unknown(u8),
}

/// Decodes the events in one read() of ep0.
pub fn parse_events(buf: &[u8]) -> impl Iterator<Item = Event> + '_ {
    buf.chunks_exact(EVENT_SIZE).map(|e| match e[8] {
        0 => Event::Bind,
        1 => Event::Unbind,
        2 => Event::Enable,
        3 => Event::Disable,
        4 => Event::Setup {
            request_type: e[0],
            request: e[1],
            value: u16::from_le_bytes([e[2], e[3]]),
            index: u16::from_le_bytes([e[4], e[5]]),
            length: u16::from_le_bytes([e[6], e[7]]),
        },
        5 => Event::Suspend,
        6 => Event::Resume,
        t => Event::Unknown(t),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usb::descriptor::{find_bulk_pipes, parse_config, PipeRequest};

    /// The HS part of the blob, wrapped as a configuration descriptor, must
    /// parse back into the bulk pair the host side looks for.
    #[test]
    fn high_speed_descriptors_round_trip_through_the_host_parser() {
        let blob = descriptors(0);
        let le = |o: usize| u32::from_le_bytes(blob[o..o + 4].try_into().unwrap()) as usize;
        assert_eq!(le(0), 3);
        assert_eq!(le(4), blob.len());
        assert_eq!(le(8), 7);
        assert_eq!((le(12), le(16), le(20)), (3, 3, 5));
        let fs_len = 9 + 7 + 7;
        let hs = &blob[24 + fs_len..24 + 2 * fs_len];
        let mut cfg = vec![9, 2, 0, 0, 1, 1, 0, 0x80, 0x32];
        cfg.extend(hs);
        let n = cfg.len() as u16;
        cfg[2..4].copy_from_slice(&n.to_le_bytes());
        let p = find_bulk_pipes(&parse_config(&cfg).unwrap(), PipeRequest::default()).unwrap();
        assert_eq!(p.bulk_in.unwrap().address, EP_IN_ADDR);
        assert_eq!(p.bulk_in.unwrap().max_packet, 512);
        assert_eq!(p.bulk_out.unwrap().address, EP_OUT_ADDR);
        let ss = &blob[24 + 2 * fs_len..];
        assert_eq!(ss.len(), 9 + 2 * (7 + 6));
    }

    #[test]
    fn an_eem_interface_carries_the_class_triple_at_every_speed() {
        let blob = descriptors_for(CDC_EEM, 0);
        let intf: Vec<usize> = (24..blob.len() - 1)
            .filter(|&i| blob[i] == 9 && blob[i + 1] == DT_INTERFACE)
            .collect();
        assert_eq!(intf.len(), 3, "one interface descriptor per speed");
        for i in intf {
            assert_eq!(&blob[i + 5..i + 8], &CDC_EEM);
        }
        assert_eq!(blob.len(), descriptors(0).len());
    }

    #[test]
    fn strings_blob_layout() {
        let s = strings("xferlab");
        assert_eq!(&s[0..4], &2u32.to_le_bytes());
        assert_eq!(
            u32::from_le_bytes(s[4..8].try_into().unwrap()) as usize,
            s.len()
        );
        assert_eq!(&s[16..18], &[0x09, 0x04]);
        assert_eq!(&s[18..], b"xferlab\0");
    }

    #[test]
    fn events_decode() {
        let mut buf = vec![0u8; 36];
        buf[8] = 2;
        buf[12..20].copy_from_slice(&[0xc1, 0x5b, 1, 0, 2, 0, 64, 0]);
        buf[20] = 4;
        buf[32] = 3;
        let ev: Vec<Event> = parse_events(&buf).collect();
        assert_eq!(
            ev,
            vec![
                Event::Enable,
                Event::Setup {
                    request_type: 0xc1,
                    request: 0x5b,
                    value: 1,
                    index: 2,
                    length: 64
                },
                Event::Disable
            ]
        );
    }
}
