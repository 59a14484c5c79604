# Guest setup for the study-1 scenarios: USB network links at once, each on
# a dummy_hcd controller of its own, so each link has a bus of its own for
# usbmon. The gadget end of each link (configfs ECM, EEM, NCM function,
# `xferlab usb gadget --function CLASS --udc dummy_udc.K`) is in a network
# namespace of its own with an xferlab server; the host end stays in the
# root namespace, where the scenario's commands run.
#   usb-net-links-setup.sh [kernel]   (scenarios/usb-net-kernel.toml): the
#     kernel's class drivers on the host end
#     ecm: server 169.254.11.1, host 169.254.11.2, usbmon 1.2,ecm
#     eem: server 169.254.12.1, host 169.254.12.2, usbmon 2.2,eem
#     ncm: server 169.254.13.1, host 169.254.13.2, usbmon 3.2,ncm
#   usb-net-links-setup.sh own        (scenarios/usb-net-own.toml): xferlab's
#     own host side (`xferlab usb net` on a TAP, the class driver detached)
#     ecm:    server 169.254.21.1, TAP xo-ecm1 169.254.21.2, usbmon 1.2,ecm
#     eem x1: server 169.254.22.1, TAP xo-eem1 169.254.22.2, usbmon 2.2,eem
#     eem x6: server 169.254.23.1, TAP xo-eem6 169.254.23.2, usbmon 3.2,eem
#     ncm x8: server 169.254.24.1, TAP xo-ncm8 169.254.24.2, usbmon 4.2,ncm
# Not both in one boot: an idle link is not free (its receive URBs stay
# queued and dummy_hcd's timer keeps walking them), and with all seven up
# the kernel's ECM link fell from 219 to 95 Mbit/s.
# Pack: --extra-modules dummy_hcd,libcomposite,usb_f_ecm,usb_f_eem,usb_f_ncm,
#   cdc_ether,cdc_eem,cdc_ncm,usbmon,tun (net_modules loads tun too). Needs usb.sh
#   and usb-net.sh beside it.
# Exits non-zero, naming the link, when one does not pass a ping.
here=$(dirname "$0")
. "$here/usb.sh" || exit 1
. "$here/usb-net.sh" || exit 1

mode=${1:-kernel}
case $mode in kernel) num=3 ;; own) num=4 ;; *) echo "usb-net-links-setup.sh: kernel or own, not '$mode'"; exit 2 ;; esac
modprobe dummy_hcd is_high_speed=1 num=$num || { echo "usb-net-links-setup.sh: modprobe dummy_hcd num=$num failed"; exit 1; }
net_modules || { echo "usb-net-links-setup.sh: pack the class modules with --extra-modules"; exit 1; }

# The ends of a link: the gadget's interface in a network namespace of its
# own with 169.254.NET.1 and a server, the host's in the root namespace
# with 169.254.NET.2; until a ping crosses.
link_ends() {   # WHAT GIF HIF NET BUS
    setsid unshare -n sleep 100000 < /dev/null > /dev/null 2>&1 &
    gns=$!
    sleep 0.2
    ip link set $2 netns $gns || return 1
    nsenter -t $gns -n sh -c "ip link set lo up; ip addr add 169.254.$4.1/24 dev $2; ip link set $2 up" || return 1
    ip addr add 169.254.$4.2/24 dev $3 && ip link set $3 up || return 1
    link_wait "$1 ($3 to $2)" $gns $2 - $3 169.254.$4.1 || { dmesg | tail -n 15; return 1; }
    server_up $gns "/tmp/server-$3.log" || return 1
    echo "$1: host $3 169.254.$4.2 -> gadget $2 169.254.$4.1 (netns of pid $gns), bus $5"
}

k=0
if [ $mode = kernel ]; then
for c in ecm eem ncm; do
    case $c in ecm) hdrv=cdc_ether; net=11 ;; eem) hdrv=cdc_eem; net=12 ;; ncm) hdrv=cdc_ncm; net=13 ;; esac
    # Its own session: the gadget outlives the setup's shell.
    setsid xferlab usb gadget --function $c --name link$c --udc dummy_udc.$k -J \
        > /tmp/gadget-$c.json 2> /tmp/gadget-$c.err < /dev/null &
    k=$((k+1))
    n=0; hif=
    while [ $n -lt 150 ]; do
        hif=$(host_if $hdrv); [ -n "$hif" ] && break
        sleep 0.1; n=$((n+1))
    done
    [ -n "$hif" ] || { echo "$c: no host interface ($hdrv)"; cat /tmp/gadget-$c.err; exit 1; }
    gif=$(cat /sys/kernel/config/usb_gadget/link$c/functions/$c.link$c/ifname)
    link_ends $c $gif $hif $net $k || exit 1
done
fi
# xferlab's own host side: the kernel's gadget function, its class driver
# detached by `xferlab usb net`, a TAP in its place.
net=21
if [ $mode = own ]; then
for cn in ecm:1 eem:1 eem:6 ncm:8; do
    c=${cn%%:*}; nf=${cn##*:}; name=xo-$c$nf; bus=$((k + 1))
    setsid xferlab usb gadget --function $c --name own$c$nf --udc dummy_udc.$k -J \
        > /tmp/gadget-$name.json 2> /tmp/gadget-$name.err < /dev/null &
    k=$((k+1))
    # Enumerated, and its class driver bound (a net device under the bus's device).
    n=0
    while ! ls -d /sys/bus/usb/devices/$bus-1:*/net/* > /dev/null 2>&1; do
        sleep 0.1; n=$((n+1))
        [ $n -gt 150 ] && { echo "own $c x$nf: no device on bus $bus"; cat /tmp/gadget-$name.err; exit 1; }
    done
    gif=$(cat /sys/kernel/config/usb_gadget/own$c$nf/functions/$c.own$c$nf/ifname)
    setsid xferlab usb net -d $bus.2 --encap $c -N $nf --tap $name -J \
        > /tmp/net-$name.json 2> /tmp/net-$name.err < /dev/null &
    n=0
    while ! ip link show $name > /dev/null 2>&1; do
        sleep 0.1; n=$((n+1))
        [ $n -gt 100 ] && { echo "own $c x$nf: no TAP $name"; cat /tmp/net-$name.err; exit 1; }
    done
    link_ends "own $c x$nf" $gif $name $net $bus || { cat /tmp/net-$name.err; exit 1; }
    net=$((net+1))
done
fi
xferlab usb list
