//! Turning what the kernel says into what a USB developer can act on: every
//! message names the cause and the fix, with the device's own numbers.

/// A udev rule that gives a group access to one device.
pub fn udev_rule(vendor: u16, product: u16) -> String {
    format!(
        "SUBSYSTEM==\"usb\", ATTR{{idVendor}}==\"{vendor:04x}\", ATTR{{idProduct}}==\"{product:04x}\", MODE=\"0660\", GROUP=\"plugdev\""
    )
}

/// Opening /dev/bus/usb/BBB/DDD was refused.
pub fn permission_denied(path: &str, vendor: u16, product: u16) -> String {
    format!(
        "permission denied opening {path} ({vendor:04x}:{product:04x}); run as root, or add the udev rule \
         `{}` to /etc/udev/rules.d/70-xferlab.rules, run `udevadm control --reload && udevadm trigger`, \
         and join the group (`usermod -aG plugdev $USER`, then log in again)",
        udev_rule(vendor, product)
    )
}

/// Claiming an interface failed because a kernel driver holds it.
pub fn interface_busy(interface: u8, driver: Option<&str>, sysfs_intf: &str) -> String {
    match driver {
        Some(d) => format!(
            "interface {interface} is held by the kernel driver `{d}`; pass --detach-kernel-driver \
             (xferlab reattaches it at exit) or unbind it: echo {sysfs_intf} > /sys/bus/usb/drivers/{d}/unbind"
        ),
        None => format!(
            "interface {interface} is busy (claimed by another program through usbfs); stop that program"
        ),
    }
}

/// An IN transfer length the endpoint cannot take without overflowing.
pub fn in_size_not_whole_packets(
    size: usize,
    endpoint: u8,
    max_packet: usize,
    speed: &str,
) -> String {
    let up = size.div_ceil(max_packet.max(1)) * max_packet;
    format!(
        "-l {size}: IN endpoint 0x{endpoint:02x} has {max_packet}-byte packets ({speed} speed), so a \
         {size}-byte read would overflow (EOVERFLOW) when the device sends a full packet; use a multiple \
         of {max_packet}, e.g. -l {up}"
    )
}

/// A transfer failed with a bus/protocol fault.
pub fn fault(endpoint: u8, is_in: bool, size: usize, max_packet: usize) -> String {
    if is_in && !size.is_multiple_of(max_packet.max(1)) {
        return format!(
            "IN endpoint 0x{endpoint:02x}: overflow (EOVERFLOW): the device sent a {max_packet}-byte packet \
             into a {size}-byte request; use a multiple of {max_packet} with -l"
        );
    }
    format!(
        "endpoint 0x{endpoint:02x}: the transfer failed with a bus fault (EOVERFLOW/EPROTO/EILSEQ: babble, \
         CRC or timeout on the wire); check the cable, the hub and `dmesg`"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_the_numbers_and_the_fix() {
        let m = permission_denied("/dev/bus/usb/001/002", 0x0525, 0xa4a0);
        assert!(
            m.contains("ATTR{idVendor}==\"0525\"") && m.contains("plugdev"),
            "{m}"
        );
        let m = interface_busy(0, Some("usbtest"), "1-1:1.0");
        assert!(
            m.contains("`usbtest`") && m.contains("/sys/bus/usb/drivers/usbtest/unbind"),
            "{m}"
        );
        let m = in_size_not_whole_packets(512, 0x81, 1024, "super");
        assert!(m.contains("EOVERFLOW") && m.contains("-l 1024"), "{m}");
        assert!(fault(0x81, true, 512, 1024).contains("EOVERFLOW"));
        assert!(fault(0x01, false, 512, 512).contains("dmesg"));
    }
}
