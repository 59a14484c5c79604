//! The local interfaces and their addresses: getifaddrs (rustix has no
//! getifaddrs).

use std::ffi::CStr;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One interface address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfAddr {
    pub name: String,
    /// Its IPv4 or IPv6 address; None for other families (link layer)
    /// and interfaces without one.
    pub ip: Option<IpAddr>,
    /// IFF_LOOPBACK.
    pub loopback: bool,
}

/// Every local interface address, in getifaddrs' order.
pub fn interface_addresses() -> io::Result<Vec<IfAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs stores a list it allocated in `head`, freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs made, alive until
        // freeifaddrs below: a valid ifaddrs whose name is a NUL-terminated
        // string and whose address, if not null, is a sockaddr of the
        // family it names (sockaddr_in / sockaddr_in6 read as such).
        let a = unsafe { &*p };
        // SAFETY: as above, ifa_name is a NUL-terminated string of the list.
        let name = unsafe { CStr::from_ptr(a.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let ip = if a.ifa_addr.is_null() {
            None
        } else {
            // SAFETY: as above; the family says which sockaddr it is.
            unsafe {
                match c_int_family((*a.ifa_addr).sa_family) {
                    libc::AF_INET => {
                        let sin = &*a.ifa_addr.cast::<libc::sockaddr_in>();
                        Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                            sin.sin_addr.s_addr,
                        ))))
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*a.ifa_addr.cast::<libc::sockaddr_in6>();
                        Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
                    }
                    _ => None,
                }
            }
        };
        out.push(IfAddr {
            name,
            ip,
            loopback: a.ifa_flags & libc::IFF_LOOPBACK as libc::c_uint != 0,
        });
        p = a.ifa_next;
    }
    // SAFETY: the list getifaddrs made, freed once; nothing refers into it
    // (names and addresses were copied out).
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

fn c_int_family(f: libc::sa_family_t) -> libc::c_int {
    libc::c_int::from(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_its_addresses() {
        let list = interface_addresses().unwrap();
        assert!(list.iter().any(|a| a.loopback
            && a.name == "lo"
            && a.ip == Some(IpAddr::V4(Ipv4Addr::LOCALHOST))));
    }
}
