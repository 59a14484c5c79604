# Guest script of crates/xferlab/tests/usb_net_vm.rs: TCP across the kernel's
# ECM, EEM and NCM links (gadget on dummy_hcd, host class driver, each end in
# its own network namespace) with usbmon accounting next to the TCP result
# and the host interface's counters. One boot; per class a section
# `== CLASS ==` (counters) with the stream JSON, and `== CLASS-mon ==` with
# the usbmon JSON.
. /work/usb.sh
. /work/usb-net.sh
T=${CELL_SECONDS:-3}
echo "== setup =="
net_modules || exit 3
for c in ${CLASSES:-ecm eem ncm}; do
    echo "== $c-start =="
    net_link_up $c || { echo "== $c =="; echo "rc=99"; net_link_down; continue; }
    before=$(if_counters ns_h $HIF)
    timeout $((T + 30)) xferlab usb mon -d $NET_ID --encap $c -t $((T + 2)) -i 1 -J $KNOBS > /tmp/mon.json 2> /tmp/mon.err &
    MPID=$!
    sleep 0.5
    ns_h timeout $((T + 30)) xferlab stream 169.254.10.1 -t $T -i 1 -J > /tmp/stream.json 2> /tmp/stream.err
    rc=$?
    wait $MPID
    mrc=$?
    after=$(if_counters ns_h $HIF)
    echo "== $c =="
    echo "rc=$rc"
    echo "gif=$GIF"
    echo "hif=$HIF"
    echo "host_before=$before"
    echo "host_after=$after"
    echo "stderr=$(tr '\n' ' ' < /tmp/stream.err)"
    cat /tmp/stream.json
    echo "== $c-mon =="
    echo "rc=$mrc"
    echo "stderr=$(tr '\n' ' ' < /tmp/mon.err)"
    cat /tmp/mon.json
    echo "== $c-down =="
    net_link_down
done
echo "== leftover =="
echo "gadgets=$(ls /sys/kernel/config/usb_gadget | wc -l)"
