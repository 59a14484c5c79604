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
cell out-wrong-pattern --dir out -l 4K -Q 4 -t $T --pattern 0
cell bytes-limit --dir in -l 16K -Q 4 -n 1M --pattern 1

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

echo "== setup-super =="
usb_hcd_reload super
ss_gadget_up 1 65536 8 && usb_wait_device 0525:a4a0 || exit 4
cell super-in-512 --dir in -l 512 -Q 1 -t $T
cell super-in-64K --dir in -l 64K -Q 32 -t $T --pattern 1
ss_gadget_down
echo "== done =="
