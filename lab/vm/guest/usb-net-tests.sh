# Guest script of crates/xferlab/tests/usb_net_vm.rs: TCP across the kernel's
# ECM, EEM and NCM links (gadget on dummy_hcd, host class driver, each end in
# its own network namespace) with usbmon accounting next to the TCP result
# and the host interface's counters. One boot; per class and test (fwd: one
# stream host to device; bidir: one each way) a section `== CLASS-TEST ==`
# (counters) with the stream JSON and `== CLASS-TEST-mon ==` with the usbmon
# JSON; rr and cbr once across the NCM link.
. /work/usb.sh
. /work/usb-net.sh
T=${CELL_SECONDS:-3}
measure() {   # CLASS NAME [stream flags]: TCP stream with usbmon and the host counters
    mc=$1; name=$2; shift 2
    before=$(if_counters ns_h $HIF)
    timeout $((T + 30)) xferlab usb mon -d $NET_ID --encap $mc -t $((T + 2)) -i 1 -J $KNOBS > /tmp/mon.json 2> /tmp/mon.err &
    MPID=$!
    sleep 0.5
    ns_h timeout $((T + 30)) xferlab stream 169.254.10.1 -t $T -i 1 -J "$@" > /tmp/stream.json 2> /tmp/stream.err
    rc=$?
    wait $MPID
    mrc=$?
    after=$(if_counters ns_h $HIF)
    echo "== $mc-$name =="
    echo "rc=$rc"
    echo "gif=$GIF"
    echo "hif=$HIF"
    echo "host_before=$before"
    echo "host_after=$after"
    echo "stderr=$(tr '\n' ' ' < /tmp/stream.err)"
    cat /tmp/stream.json
    echo "== $mc-$name-mon =="
    echo "rc=$mrc"
    echo "stderr=$(tr '\n' ' ' < /tmp/mon.err)"
    cat /tmp/mon.json
}

echo "== setup =="
net_modules || exit 3
for c in ${CLASSES:-ecm eem ncm}; do
    echo "== $c-start =="
    net_link_up $c || { echo "== $c-fwd =="; echo "rc=99"; net_link_down; continue; }
    measure $c fwd
    measure $c bidir --bidir
    if [ $c = ncm ]; then
        # The other patterns cross the same link.
        ns_h timeout 60 xferlab rr 169.254.10.1 -t 2 -J > /tmp/rr.json 2> /tmp/rr.err
        echo "== $c-rr =="; echo "rc=$?"; echo "stderr=$(tr '\n' ' ' < /tmp/rr.err)"; cat /tmp/rr.json
        ns_h timeout 60 xferlab cbr 169.254.10.1 -b 5M -t 2 -J > /tmp/cbr.json 2> /tmp/cbr.err
        echo "== $c-cbr =="; echo "rc=$?"; echo "stderr=$(tr '\n' ' ' < /tmp/cbr.err)"; cat /tmp/cbr.json
    fi
    echo "== $c-down =="
    net_link_down
done
echo "== leftover =="
echo "gadgets=$(ls /sys/kernel/config/usb_gadget | wc -l)"
