# Guest setup for USB experiments in the lab VM (busybox sh): a USB device
# on dummy_hcd for `xferlab usb bulk` to measure, in the same guest.
#
#   sh /work/guest/usb-gadget-setup.sh [--function sourcesink|ffs|cbr] [--speed high|super]
#        [--pattern 0|1|2] [--buflen BYTES] [--qlen N]
#
# Needs usb.sh beside it (add the directory: lab/vm/run --add lab/vm/guest:/work/guest)
# and the modules packed, not loaded (they take parameters):
#   --extra-modules dummy_hcd,libcomposite,usb_f_ss_lb      (sourcesink)
#   --extra-modules dummy_hcd,libcomposite,usb_f_fs         (ffs, cbr)
#
# sourcesink (default): the kernel's SourceSink function (usb_f_ss_lb), as
#   tests/usb_vm.rs uses it: 0525:a4a0, bulk IN is the source, bulk OUT the
#   sink, each with --qlen requests of --buflen bytes queued in the gadget.
#   --pattern 2 (default) = no data pattern: the sink checks nothing, so any
#   host `--pattern` works and no CPU goes to checking. With 1 (mod63) the
#   host must pass `--pattern 1` for OUT (the sink stalls on other data) and
#   may pass it for IN (checked); with 0 (zeros) likewise.
# ffs: xferlab's own FunctionFS gadget (`xferlab usb gadget`, AIO, --qlen
#   requests in flight, --buflen bytes each), 1d6b:0104, left running in the
#   background (log in /tmp/usb-gadget.log); pattern 2 is given as `none`.
# cbr: xferlab's fixed-rate device (`xferlab usb gadget --function cbr`,
#   1d6b:0104) for `xferlab usb cbr`, in the background likewise; each
#   trial's rate and buffers come from the host, so no other option applies.
#
# Prints `xferlab usb list` at the end; exits non-zero (with the reason) if
# the device does not enumerate within 15 s.
here=$(dirname "$0")
. "$here/usb.sh" || exit 1

function=sourcesink
speed=high
pattern=2
buflen=65536
qlen=8
while [ $# -gt 0 ]; do
    case "$1" in
        --function) function=$2; shift 2 ;;
        --speed) speed=$2; shift 2 ;;
        --pattern) pattern=$2; shift 2 ;;
        --buflen) buflen=$2; shift 2 ;;
        --qlen) qlen=$2; shift 2 ;;
        *) echo "usb-gadget-setup.sh: unknown option $1"; exit 2 ;;
    esac
done
case "$speed" in high|super) ;; *) echo "usb-gadget-setup.sh: --speed high|super, not $speed"; exit 2 ;; esac

usb_hcd "$speed" || { echo "usb-gadget-setup.sh: modprobe failed; pack dummy_hcd,libcomposite,usb_f_ss_lb with --extra-modules"; exit 1; }
[ -n "$(udc_name)" ] || { echo "usb-gadget-setup.sh: no UDC in /sys/class/udc (dummy_hcd not loaded?)"; exit 1; }

case "$function" in
    sourcesink)
        ss_gadget_up "$pattern" "$buflen" "$qlen" || { echo "usb-gadget-setup.sh: configfs gadget setup failed"; exit 1; }
        usb_wait_device 0525:a4a0 15 || exit 1
        ;;
    ffs)
        modprobe usb_f_fs || { echo "usb-gadget-setup.sh: modprobe usb_f_fs failed; pack it with --extra-modules"; exit 1; }
        case "$pattern" in 0) p=zeros ;; 1) p=mod63 ;; *) p=none ;; esac
        # Its own session: not killed with the setup's shell, output to a file.
        setsid xferlab usb gadget --io aio --queue "$qlen" -l "$buflen" --pattern "$p" \
            < /dev/null > /tmp/usb-gadget.log 2>&1 &
        usb_wait_device 1d6b:0104 15 || { cat /tmp/usb-gadget.log; exit 1; }
        ;;
    cbr)
        modprobe usb_f_fs || { echo "usb-gadget-setup.sh: modprobe usb_f_fs failed; pack it with --extra-modules"; exit 1; }
        setsid xferlab usb gadget --function cbr < /dev/null > /tmp/usb-gadget.log 2>&1 &
        usb_wait_device 1d6b:0104 15 || { cat /tmp/usb-gadget.log; exit 1; }
        ;;
    *) echo "usb-gadget-setup.sh: --function sourcesink|ffs|cbr, not $function"; exit 2 ;;
esac
xferlab usb list
