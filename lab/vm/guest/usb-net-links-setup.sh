# Guest setup for the study-1 scenario on the kernel's drivers
# (scenarios/usb-net-kernel.toml): three USB network links at once, each on
# a dummy_hcd controller of its own (dummy_hcd num=3), so each link has a
# bus of its own for usbmon. The gadget end of each link (configfs ECM, EEM,
# NCM function, `xferlab usb gadget --function CLASS --udc dummy_udc.K`) is
# in a network namespace of its own with an xferlab server; the host end
# (cdc_ether, cdc_eem, cdc_ncm) stays in the root namespace, where the
# scenario's commands run:
#   ecm: server 169.254.11.1, host 169.254.11.2, usbmon 1.2,ecm
#   eem: server 169.254.12.1, host 169.254.12.2, usbmon 2.2,eem
#   ncm: server 169.254.13.1, host 169.254.13.2, usbmon 3.2,ncm
# Pack: --extra-modules dummy_hcd,libcomposite,usb_f_ecm,usb_f_eem,usb_f_ncm,
#   cdc_ether,cdc_eem,cdc_ncm,usbmon,tun (net_modules loads tun too). Needs usb.sh
#   and usb-net.sh beside it.
# Exits non-zero, naming the link, when one does not pass a ping.
here=$(dirname "$0")
. "$here/usb.sh" || exit 1
. "$here/usb-net.sh" || exit 1

modprobe dummy_hcd is_high_speed=1 num=3 || { echo "usb-net-links-setup.sh: modprobe dummy_hcd num=3 failed"; exit 1; }
net_modules || { echo "usb-net-links-setup.sh: pack the class modules with --extra-modules"; exit 1; }

k=0
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
    setsid unshare -n sleep 100000 < /dev/null > /dev/null 2>&1 &
    gns=$!
    sleep 0.2
    ip link set $gif netns $gns || exit 1
    nsenter -t $gns -n sh -c "ip link set lo up; ip addr add 169.254.$net.1/24 dev $gif; ip link set $gif up" || exit 1
    ip addr add 169.254.$net.2/24 dev $hif && ip link set $hif up || exit 1
    link_wait "$c ($hif to $gif)" $gns $gif - $hif 169.254.$net.1 || { dmesg | tail -n 15; exit 1; }
    server_up $gns /tmp/server-$c.log || exit 1
    echo "$c: host $hif 169.254.$net.2 -> gadget $gif 169.254.$net.1 (netns of pid $gns), bus $k"
done
xferlab usb list
