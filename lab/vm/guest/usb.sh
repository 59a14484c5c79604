# Guest-side helpers for USB tests in the lab VM (busybox sh). Source it:
#   . /work/usb.sh
#   usb_hcd high            # dummy_hcd at high (or super) speed + libcomposite
#   ss_gadget_up 1 4096 8   # kernel SourceSink: pattern, bulk_buflen, bulk_qlen
#   usb_wait_device 0525:a4a0
#   ss_gadget_down
G=/sys/kernel/config/usb_gadget/ss

usb_hcd() {   # usb_hcd high|super
    case "$1" in
        super) modprobe dummy_hcd is_super_speed=1 ;;
        *) modprobe dummy_hcd is_high_speed=1 ;;
    esac
    modprobe libcomposite && modprobe usb_f_ss_lb
    grep -q " /sys/kernel/config " /proc/mounts || mount -t configfs configfs /sys/kernel/config
}

usb_hcd_reload() {   # switch speed: gadgets must be down
    rmmod dummy_hcd && usb_hcd "$1"
}

udc_name() { ls /sys/class/udc | head -n1; }

ss_gadget_up() {   # pattern buflen qlen
    mkdir -p $G || return 1
    echo 0x0525 > $G/idVendor
    echo 0xa4a0 > $G/idProduct
    mkdir -p $G/strings/0x409
    echo xferlab-lab > $G/strings/0x409/serialnumber
    echo "Linux" > $G/strings/0x409/manufacturer
    echo "Gadget Zero (SourceSink)" > $G/strings/0x409/product
    mkdir -p $G/functions/SourceSink.0
    echo "${1:-1}" > $G/functions/SourceSink.0/pattern
    echo "${2:-4096}" > $G/functions/SourceSink.0/bulk_buflen
    echo "${3:-8}" > $G/functions/SourceSink.0/bulk_qlen
    mkdir -p $G/configs/c.1/strings/0x409
    echo "sourcesink" > $G/configs/c.1/strings/0x409/configuration
    ln -s $G/functions/SourceSink.0 $G/configs/c.1/
    udc_name > $G/UDC
}

ss_gadget_down() {
    [ -d $G ] || return 0
    echo "" > $G/UDC 2>/dev/null
    rm -f $G/configs/c.1/SourceSink.0
    rmdir $G/configs/c.1/strings/0x409 $G/configs/c.1 $G/functions/SourceSink.0 \
          $G/strings/0x409 $G 2>/dev/null
    return 0
}

usb_wait_device() {   # VID:PID [seconds]: until it is enumerated and configured
    n=0
    while [ $n -lt $(( ${2:-10} * 10 )) ]; do
        for d in /sys/bus/usb/devices/*; do
            [ -f $d/idVendor ] || continue
            if [ "$(cat $d/idVendor):$(cat $d/idProduct)" = "$1" ] && \
               [ -n "$(cat $d/bConfigurationValue 2>/dev/null)" ]; then
                return 0
            fi
        done
        sleep 0.1; n=$((n+1))
    done
    echo "usb_wait_device: $1 did not appear"; return 1
}
