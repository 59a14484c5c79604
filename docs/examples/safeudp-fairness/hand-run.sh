#!/bin/bash
# One run of the hand-run table in docs/safeudp.md (as root):
# hand-run.sh N QDISC MODE, MODE udp|ccid3|ignore|step-down|tfrc  -> ${OUT:-/tmp/sufair}/N-QDISC-MODE.json
N=$1; Q=$2; M=$3
X=${XFERLAB:-xferlab}
case $M in
  udp) CBR="-u";;
  ccid3) CBR="--dccp --ccid 3";;
  *) CBR="--dccp --ccid 248 --on-congestion $M";;
esac
QD=""; [ "$Q" = codel ] && QD="--qdisc codel"
flock /tmp/xferlab-tests.lock $X lab --rate 20M --delay 20ms --queue 100p $QD --no-probe --allow-invalid \
  --client cbr --client bg \
  @cbr stream $CBR -b 16M -l 1200 -t 20 -i 0.5 -J \
  @bg stream -P $N -C cubic -t 20 -i 0.5 -J > ${OUT:-/tmp/sufair}/$N-$Q-$M.json 2> ${OUT:-/tmp/sufair}/$N-$Q-$M.err
echo "$N $Q $M rc=$?"
