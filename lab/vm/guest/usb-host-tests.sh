# Guest script of crates/xferlab/tests/usb_vm.rs: xferlab's host side against
# the kernel's SourceSink gadget on dummy_hcd. One boot, many cells; each
# prints `== NAME ==`, `rc=N`, `stderr=...` and then the JSON result.
. /work/usb.sh
T=${CELL_SECONDS:-1}

cell() {   # cell NAME xferlab-args...
    name=$1; shift
    xferlab usb bulk -d 0525:a4a0 -J "$@" > /tmp/cell.json 2> /tmp/cell.err
    rc=$?
    echo "== $name =="
    echo "rc=$rc"
    echo "stderr=$(tr '\n' ' ' < /tmp/cell.err)"
    cat /tmp/cell.json
}

echo "== setup-high =="
usb_hcd high
ss_gadget_up 1 65536 8 && usb_wait_device 0525:a4a0 || exit 3
xferlab usb list

for dir in in out; do
    for size in 512 16K 64K; do
        for depth in 1 32; do
            cell "$dir-$size-$depth" --dir $dir -l $size -Q $depth -t $T --pattern 1 -i 0.5
        done
    done
done
cell both-16K-8 --dir both -l 16K -Q 8 -t $T --pattern 1
# The sink checks OUT data against its pattern (1) and halts its endpoint
# on the first bad byte: zeros must come back as stalls, cleared and counted.
# (Its half-filled OUT request keeps zeros afterwards: later cells use IN.)
cell out-wrong-pattern --dir out -l 4K -Q 4 -t $T --pattern 0
cell bytes-limit --dir in -l 16K -Q 4 -n 1M --pattern 1 --serial xferlab-lab
# Selection by BUS.ADDR, and without -d (the one vendor-specific device).
busaddr=$(for d in /sys/bus/usb/devices/*; do [ "$(cat $d/idProduct 2>/dev/null)" = a4a0 ] && \
          echo "$(cat $d/busnum).$(cat $d/devnum)"; done)
xferlab usb bulk -d $busaddr -J --dir in -l 16K -Q 4 -n 1M --pattern 1 > /tmp/cell.json 2> /tmp/cell.err
rc=$?
echo "== select-busaddr =="
echo "rc=$rc"
echo "busaddr=$busaddr"
echo "stderr=$(tr '\n' ' ' < /tmp/cell.err)"
cat /tmp/cell.json
xferlab usb bulk -J --dir in -l 16K -Q 4 -n 1M > /tmp/cell.json 2> /tmp/cell.err
rc=$?
echo "== select-auto =="
echo "rc=$rc"
echo "stderr=$(tr '\n' ' ' < /tmp/cell.err)"
cat /tmp/cell.json
cell select-wrong-serial --dir in -l 16K -Q 4 -n 1M --serial nope

# Disconnect mid-test: unbind the UDC while a 30 s run is going.
xferlab usb bulk -d 0525:a4a0 -J --dir in -l 16K -Q 8 -t 30 --pattern 1 > /tmp/cell.json 2> /tmp/cell.err &
pid=$!
sleep 2
echo "" > $G/UDC
t0=$(date +%s)
wait $pid
rc=$?
echo "== disconnect =="
echo "rc=$rc"
echo "stderr=$(tr '\n' ' ' < /tmp/cell.err)"
echo "exit_after_unbind_s=$(( $(date +%s) - t0 ))"
cat /tmp/cell.json
ss_gadget_down

# A kernel driver holding the interface: usbtest binds 0525:a4a0 by itself.
# Pattern 0 (zeros) here: usbtest's queued write (test 27) sends zeros.
ss_gadget_up 0 65536 8 && usb_wait_device 0525:a4a0 || exit 5
modprobe usbtest
sleep 0.5
cell busy --dir in -l 16K -Q 4 -t $T
cell detach --dir in -l 16K -Q 4 -t $T --detach-kernel-driver --pattern 0
echo "== after-detach =="
ls /sys/bus/usb/drivers/usbtest/ | grep -c ':1.0' || true

# The kernel's reference tool on the same gadget, 64 KiB queued x32, next to
# xferlab with the same bytes (usbtest tests 27/28: iterations x sglen x size).
if [ -x /work/testusb ]; then
    dev=$(for d in /sys/bus/usb/devices/*; do [ "$(cat $d/idProduct 2>/dev/null)" = a4a0 ] && \
          printf '/dev/bus/usb/%03d/%03d' $(cat $d/busnum) $(cat $d/devnum); done)
    for t in 27 28; do
        echo "== testusb-$t =="
        /work/testusb -D $dev -t $t -s 65536 -g 32 -c ${CMP_ITER:-32} 2>&1
        echo "rc=$?"
    done
    cell cmp-xferlab-out --dir out -l 64K -Q 32 -n $(( ${CMP_ITER:-32} * 32 * 65536 )) --detach-kernel-driver
    cell cmp-xferlab-in --dir in -l 64K -Q 32 -n $(( ${CMP_ITER:-32} * 32 * 65536 )) --detach-kernel-driver
fi
rmmod usbtest
ss_gadget_down

# xferlab's own gadget: FunctionFS source/sink, AIO then sync, against the host side.
# The sync gadget runs device-loaded (study 4's `stress -c 1 -m 1` on the
# device, as the global --load): its load report ends on its stderr.
modprobe usb_f_fs
for io in aio sync; do
    load=
    [ $io = sync ] && load="--load cpu=1,mem=1,vm-bytes=16M"
    xferlab $load usb gadget --io $io --queue 8 -l 16K --pattern 1 -J > /tmp/gadget.json 2> /tmp/gadget.err &
    gpid=$!
    usb_wait_device 1d6b:0104 || { cat /tmp/gadget.err; exit 6; }
    for dir in in out both; do
        xferlab usb bulk -d 1d6b:0104 -J --dir $dir -l 16K -Q 8 -t $T --pattern 1 > /tmp/cell.json 2> /tmp/cell.err
        rc=$?
        echo "== ffs-$io-$dir =="
        echo "rc=$rc"
        echo "stderr=$(tr '\n' ' ' < /tmp/cell.err)"
        cat /tmp/cell.json
    done
    kill -INT $gpid
    wait $gpid
    grc=$?
    echo "== ffs-$io-gadget =="
    echo "rc=$grc"
    echo "stderr=$(tr '\n' ' ' < /tmp/gadget.err)"
    echo "leftover_configfs=$(ls /sys/kernel/config/usb_gadget | wc -l)"
    echo "leftover_mounts=$(grep -c functionfs /proc/mounts)"
    cat /tmp/gadget.json
done
# The kernel SourceSink through `xferlab usb gadget --function sourcesink`, for -t seconds.
xferlab usb gadget --function sourcesink --pattern 1 -l 64K --queue 8 -t 8 > /tmp/gadget.out 2>&1 &
gpid=$!
usb_wait_device 0525:a4a0 || { cat /tmp/gadget.out; exit 7; }
cell ss-gadget-both --dir both -l 16K -Q 8 -t $T --pattern 1
wait $gpid
grc=$?
echo "== ss-gadget-exit =="
echo "rc=$grc"
echo "leftover_configfs=$(ls /sys/kernel/config/usb_gadget | wc -l)"
cat /tmp/gadget.out

# A killed gadget leaves configfs state; the next run names the fix, --cleanup removes it.
xferlab usb gadget > /dev/null 2>&1 &
gpid=$!
usb_wait_device 1d6b:0104
kill -KILL $gpid; wait $gpid
xferlab usb gadget -t 1 > /dev/null 2> /tmp/cell.err
rc=$?
echo "== gadget-leftover =="
echo "rc=$rc"
echo "stderr=$(tr '\n' ' ' < /tmp/cell.err)"
xferlab usb gadget --cleanup
echo "cleanup_rc=$?"
echo "leftover_configfs=$(ls /sys/kernel/config/usb_gadget | wc -l)"
echo "leftover_mounts=$(grep -c functionfs /proc/mounts)"

echo "== setup-super =="
usb_hcd_reload super
ss_gadget_up 1 65536 8 && usb_wait_device 0525:a4a0 || exit 4
cell super-in-512 --dir in -l 512 -Q 1 -t $T
cell super-in-64K --dir in -l 64K -Q 32 -t $T --pattern 1
ss_gadget_down
echo "== done =="
