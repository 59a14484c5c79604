# Guest-side helpers for kernel USB network links in the lab VM (busybox sh).
# Source after usb.sh:
#   . /work/usb.sh; . /work/usb-net.sh
#   net_modules                      # dummy_hcd high speed, functions, host class drivers, usbmon
#   net_link_up ncm [qmult] [mtu]    # gadget + host driver; each end in its own netns
#   ns_g CMD... / ns_h CMD...        # run CMD in the gadget's / the host's namespace
#   net_link_down
# After net_link_up: $GIF (gadget-side interface), $HIF (host-side), $GNS/$HNS
# (pids holding the namespaces), 169.254.10.1 (gadget) and 169.254.10.2 (host),
# $KNOBS (`--knob k=v` for `xferlab usb mon`: class, mtu, qmult, cdc_ncm's
# tx_max/rx_max/tx_timer_usecs/min_tx_pkt, set from $NCM_tx_max etc. if given).
NET_GADGET=netlink
NET_ID=0525:a4a1

net_modules() {
    modprobe dummy_hcd is_high_speed=1 && modprobe libcomposite || return 1
    grep -q " /sys/kernel/config " /proc/mounts || mount -t configfs configfs /sys/kernel/config
    for m in usb_f_ecm usb_f_eem usb_f_ncm cdc_ether cdc_eem cdc_ncm usbmon tun; do
        modprobe $m || { echo "modprobe $m failed"; return 1; }
    done
}

host_if() {   # [DRIVER]: the net device a host class driver (this one) made
    for d in /sys/bus/usb/devices/*:*/net/*; do
        [ -e "$d" ] || continue
        drv=$(basename "$(readlink ${d%/net/*}/driver)")
        [ -z "$1" ] || [ "$drv" = "$1" ] && basename "$d"
    done | head -n1
}

ns_g() { nsenter -t $GNS -n "$@"; }
ns_h() { nsenter -t $HNS -n "$@"; }

net_link_up() {   # CLASS [QMULT] [MTU]
    q=${2:+--qmult $2}
    case $1 in ecm) hdrv=cdc_ether ;; eem) hdrv=cdc_eem ;; ncm) hdrv=cdc_ncm ;; esac
    xferlab usb gadget --function $1 --name $NET_GADGET $q -J > /tmp/gadget.json 2> /tmp/gadget.err &
    GPID=$!
    n=0
    HIF=
    while [ $n -lt 150 ]; do
        HIF=$(host_if $hdrv)
        [ -n "$HIF" ] && break
        sleep 0.1; n=$((n+1))
    done
    if [ -z "$HIF" ]; then
        echo "net_link_up $1: no host interface"; cat /tmp/gadget.err; dmesg | tail -n 20; return 1
    fi
    GIF=$(cat /sys/kernel/config/usb_gadget/$NET_GADGET/functions/$1.$NET_GADGET/ifname)
    if [ -n "$3" ]; then
        ip link set dev $GIF mtu $3 && ip link set dev $HIF mtu $3 || return 1
    fi
    # The knobs, set (cdc_ncm's from $NCM_tx_max etc.) and read back for the result.
    KNOBS="--knob class=$1 --knob mtu=$(cat /sys/class/net/$HIF/mtu)"
    KNOBS="$KNOBS --knob qmult=$(cat /sys/kernel/config/usb_gadget/$NET_GADGET/functions/$1.$NET_GADGET/qmult)"
    if [ -d /sys/class/net/$HIF/cdc_ncm ]; then
        for k in tx_max rx_max tx_timer_usecs min_tx_pkt; do
            eval v=\$NCM_$k
            [ -n "$v" ] && { echo $v > /sys/class/net/$HIF/cdc_ncm/$k || return 1; }
            KNOBS="$KNOBS --knob $k=$(cat /sys/class/net/$HIF/cdc_ncm/$k)"
        done
    fi
    unshare -n sleep 100000 &
    GNS=$!
    unshare -n sleep 100000 &
    HNS=$!
    sleep 0.2
    ip link set $GIF netns $GNS && ip link set $HIF netns $HNS || return 1
    ns_g sh -c "ip link set lo up; ip addr add 169.254.10.1/16 dev $GIF; ip link set $GIF up" || return 1
    ns_h sh -c "ip link set lo up; ip addr add 169.254.10.2/16 dev $HIF; ip link set $HIF up" || return 1
    link_wait "net_link_up $1" $GNS $GIF $HNS $HIF 169.254.10.1 || { net_diag; return 1; }
    server_up $GNS /tmp/server.log
}

# Waits until the host end reaches the gadget end. Now and then (2 links
# of 18 in one boot here) the host end never gets the function's
# NETWORK_CONNECTION notification and stays NO-CARRIER; taking the gadget
# end down and up sends it again (said in the output).
link_wait() {   # WHAT GNS GIF HNS|- HIF ADDR   (-: the host end is in the root namespace)
    lw_h=; [ "$4" = - ] || lw_h="nsenter -t $4 -n"
    n=0
    while ! $lw_h ping -c 1 -W 1 $6 > /dev/null 2>&1; do
        n=$((n+1))
        if [ $n = 5 ] && $lw_h ip link show $5 | grep -q NO-CARRIER; then
            echo "$1: the host end has no carrier after 5 s; gadget end down and up"
            nsenter -t $2 -n ip link set $3 down; nsenter -t $2 -n ip link set $3 up
        fi
        [ $n -gt 30 ] && { echo "$1: no ping across"; return 1; }
    done
    return 0   # not the loop's status: its last body command may be a false test
}

# An xferlab server in the namespace held by pid GNS, in a session of its
# own (it outlives a setup script's shell); waits until it listens. Sets
# SPID: setsid and nsenter exec, so $! is the server itself.
server_up() {   # GNS LOG
    setsid nsenter -t $1 -n xferlab server < /dev/null > $2 2>&1 &
    SPID=$!
    n=0
    while ! nsenter -t $1 -n sh -c "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null" | grep -qi ':14AA '; do
        sleep 0.1; n=$((n+1)); [ $n -gt 100 ] && { echo "server did not listen"; return 1; }
    done
    return 0
}

# What a link that does not pass a ping looks like: both ends' flags (carrier),
# counters, addresses and neighbours, the USB interfaces' altsettings and
# drivers, the kernel's last words.
net_diag() {
    echo "gadget end ($GIF):"; ns_g ip addr show $GIF; ns_g ip neigh; ns_g cat /proc/net/dev
    echo "host end ($HIF):"; ns_h ip addr show $HIF; ns_h ip neigh; ns_h cat /proc/net/dev
    echo "root namespace: $(ip -br link | tr '\n' ';')"
    for d in /sys/bus/usb/devices/*:*; do
        echo "$(basename $d) class=$(cat $d/bInterfaceClass) alt=$(cat $d/bAlternateSetting) driver=$(basename "$(readlink $d/driver)")"
    done
    dmesg | tail -n 15
}

# `IF rx_bytes rx_packets tx_bytes tx_packets` from the namespace's /proc/net/dev.
if_counters() {   # ns_g|ns_h IF
    $1 cat /proc/net/dev | sed -n "s/^ *$2: *//p" | awk '{print $1, $2, $9, $10}'
}

# Stops background processes by pid; none given, nothing waited for (a bare
# `wait` waits for every child: the namespaces' sleeps run 100000 s).
stop_pids() {   # SIGNAL [PID...]
    sig=$1; shift
    [ $# -gt 0 ] || return 0
    kill -$sig "$@" 2>/dev/null; wait "$@" 2>/dev/null
}

net_link_down() {   # every step bounded: a hung step is named, not waited for
    stop_pids TERM $SPID; SPID=
    # The namespaces go first: their interfaces return to the root namespace.
    stop_pids TERM $GNS $HNS; GNS= HNS=
    kill -INT $GPID 2>/dev/null
    n=0
    while kill -0 $GPID 2>/dev/null; do
        sleep 0.1; n=$((n+1))
        [ $n -gt 150 ] && { echo "net_link_down: gadget did not exit in 15 s"; kill -KILL $GPID; break; }
    done
    wait $GPID 2>/dev/null
    xferlab usb gadget --cleanup --name $NET_GADGET > /dev/null 2>&1
    # The host driver's interface goes with the device; wait for it.
    n=0
    while [ -n "$(host_if)" ] && [ $n -lt 50 ]; do sleep 0.1; n=$((n+1)); done
}

# xferlab's own gadget side (`usb gadget --function net`, FunctionFS + AIO,
# or with VIA=raw-gadget a device of its own through /dev/raw-gadget that
# announces real CDC interfaces) with the kernel's class driver or xferlab's
# own host side (`usb net`) as the host; the same namespaces, addresses,
# server and $HIF as net_link_up.
#   own_gadget_up CLASS N kernel|own   # gadget TAP xg0 in $GNS; host $HIF in $HNS
#   own_gadget_down [kill]             # SIGINT (counters to /tmp/og.json), or SIGKILL + --cleanup
OWN_GADGET=ownnet
OWN_ID=1d6b:0104

own_gadget_up() {   # CLASS N kernel|own
    unshare -n sleep 100000 &
    GNS=$!
    unshare -n sleep 100000 &
    HNS=$!
    sleep 0.2
    nsenter -t $GNS -n xferlab usb gadget --function net --encap $1 -N $2 --tap xg0 \
        --name $OWN_GADGET --via ${VIA:-functionfs} -J > /tmp/og.json 2> /tmp/og.err &
    GPID=$!
    NPID=
    n=0
    if [ $3 = kernel ]; then
        # FunctionFS cannot announce ECM or NCM to their kernel drivers
        # (no CDC functional descriptors); raw-gadget can.
        case ${VIA:-functionfs}-$1 in
            *-eem) hdrv=cdc_eem ;;
            raw-gadget-ecm) hdrv=cdc_ether ;;
            raw-gadget-ncm) hdrv=cdc_ncm ;;
            *) echo "own_gadget_up: no kernel host for $1 over ${VIA:-functionfs}"; return 1 ;;
        esac
        HIF=
        while [ $n -lt 150 ]; do
            HIF=$(host_if $hdrv)
            [ -n "$HIF" ] && break
            sleep 0.1; n=$((n+1))
        done
        [ -n "$HIF" ] || { echo "own_gadget_up $1: no host interface"; cat /tmp/og.err; return 1; }
        ip link set $HIF netns $HNS || return 1
    else
        usb_wait_device $OWN_ID 15 || { cat /tmp/og.err; return 1; }
        nsenter -t $HNS -n xferlab usb net -d $OWN_ID --encap $1 -N $2 --tap xl0 -J \
            > /tmp/on.json 2> /tmp/on.err &
        NPID=$!
        HIF=xl0
        while ! ns_h ip link show xl0 > /dev/null 2>&1; do
            sleep 0.1; n=$((n+1)); [ $n -gt 100 ] && { cat /tmp/on.err; return 1; }
        done
    fi
    n=0
    while ! ns_g ip link show xg0 > /dev/null 2>&1; do
        sleep 0.1; n=$((n+1)); [ $n -gt 100 ] && { cat /tmp/og.err; return 1; }
    done
    ns_g sh -c "ip link set lo up; ip addr add 169.254.10.1/16 dev xg0; ip link set xg0 up" || return 1
    ns_h sh -c "ip link set lo up; ip addr add 169.254.10.2/16 dev $HIF; ip link set $HIF up" || return 1
    link_wait "own_gadget_up $1" $GNS xg0 $HNS $HIF 169.254.10.1 || { cat /tmp/og.err; return 1; }
    server_up $GNS /tmp/server.log
}

own_gadget_down() {   # [kill]: prints gadget_rc, host_rc, taps, gadgets_left, gadgets
    stop_pids TERM $SPID; SPID=
    if [ "$1" = kill ]; then
        kill -KILL $GPID 2>/dev/null
    else
        kill -INT $GPID 2>/dev/null
    fi
    n=0
    while kill -0 $GPID 2>/dev/null; do
        sleep 0.1; n=$((n+1)); [ $n -gt 150 ] && { echo "own_gadget_down: gadget did not exit in 15 s"; kill -KILL $GPID; break; }
    done
    wait $GPID 2>/dev/null
    echo "gadget_rc=$?"
    # The TAP goes with the process, SIGKILL too; a configfs gadget stays
    # until --cleanup, a raw-gadget device goes with its descriptor.
    echo "taps=$(ns_g ip link show 2>/dev/null | grep -c xg0)"
    echo "gadgets_left=$(ls /sys/kernel/config/usb_gadget | grep -c $OWN_GADGET)"
    if [ -n "$NPID" ]; then
        # xferlab's host side ends by itself when the device goes; bounded anyway.
        n=0
        while kill -0 $NPID 2>/dev/null && [ $n -lt 50 ]; do sleep 0.1; n=$((n+1)); done
        kill -INT $NPID 2>/dev/null
        wait $NPID 2>/dev/null
        echo "host_rc=$?"
    fi
    xferlab usb gadget --cleanup --name $OWN_GADGET > /dev/null 2>&1
    echo "gadgets=$(ls /sys/kernel/config/usb_gadget | grep -c $OWN_GADGET)"
    echo "mounts=$(grep -c xferlab-ffs-$OWN_GADGET /proc/mounts)"
    stop_pids TERM $GNS $HNS; GNS= HNS=
    n=0
    while [ -n "$(host_if)" ] && [ $n -lt 50 ]; do sleep 0.1; n=$((n+1)); done
    echo "host_ifs=$(host_if | grep -c .)"
}
