# Guest script of crates/xferlab/tests/usb_vm.rs (fixed_rate_streaming...):
# `xferlab usb cbr` against xferlab's fixed-rate FunctionFS device on
# dummy_hcd. One boot, many cells; each prints `== NAME ==`, `rc=N`,
# `stderr=...` and then the JSON report.
. /work/usb.sh
T=${CELL_SECONDS:-2}

cell() {   # cell NAME xferlab-usb-cbr-args...
    name=$1; shift
    xferlab usb cbr -d 1d6b:0104 -J "$@" > /tmp/cell.json 2> /tmp/cell.err
    rc=$?
    echo "== $name =="
    echo "rc=$rc"
    echo "stderr=$(tr '\n' ' ' < /tmp/cell.err)"
    cat /tmp/cell.json
}

echo "== setup =="
usb_hcd high
modprobe usb_f_fs
xferlab usb gadget --function cbr -J > /tmp/gadget.json 2> /tmp/gadget.err &
gpid=$!
usb_wait_device 1d6b:0104 || { cat /tmp/gadget.err; exit 6; }

# Far below what dummy_hcd moves (~30 MB/s through FunctionFS AIO under TCG).
# A 512K device buffer lasts 256 ms at 2 MB/s (TX prefill: 128 ms): on a
# loaded CI host the TCG guest once paused ~40 ms, and the default 64K
# (32 ms) overran at 1.1 s. The stall cells below keep 64K on purpose.
cell rx-slow --dir rx -b 2M -t $T --device-buffer 512K
cell tx-slow --dir tx -b 2M -t $T --device-buffer 512K
cell both-slow --dir both -b 2M -t $T --device-buffer 512K
# The host application stops for 300 ms every second: the device buffer
# (64K) plus the host's (4 x 16K) last 32 ms at 4 MB/s.
cell rx-stall --dir rx -b 4M -t 2.5 -Q 4 --host-stall 1s:300ms
cell tx-stall --dir tx -b 4M -t 2.5 -Q 4 --host-stall 1s:300ms
# The study's ladder (below it two rungs TCG surely sustains), 5 runs.
# The host buffer given as such: 1M of 64K transfers is 16 in flight.
cell ladder --dir rx --ladder 4M,8M,16M,18.3M,21.3M,25.6M,32M,42.6M --repeat 5 -t 1 \
    -l 64K --host-buffer 1M --device-buffer 1M --device-request 64K
# Human output, one rate.
xferlab usb cbr -d 1d6b:0104 --dir both -b 1M -t 1 > /tmp/human.txt 2>&1
rc=$?
echo "== human =="
cat /tmp/human.txt
echo "rc=$rc"
kill -INT $gpid
wait $gpid
grc=$?
echo "== gadget =="
echo "rc=$grc"
echo "stderr=$(tr '\n' ' ' < /tmp/gadget.err)"
echo "leftover_configfs=$(ls /sys/kernel/config/usb_gadget | wc -l)"
cat /tmp/gadget.json

# A device that is not the fixed-rate device: the kernel's SourceSink.
ss_gadget_up 1 65536 8 && usb_wait_device 0525:a4a0 || exit 5
xferlab usb cbr -d 0525:a4a0 -b 1M -t 1 > /tmp/cell.json 2> /tmp/cell.err
rc=$?
echo "== not-cbr =="
echo "rc=$rc"
echo "stderr=$(tr '\n' ' ' < /tmp/cell.err)"
ss_gadget_down
