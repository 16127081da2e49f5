#!/bin/bash
# fio (nbd engine) 4 KiB random-write IOPS over `ecstack array serve` per scheme, (6+2) on O_DIRECT
# files, region pre-written so every write is an update; queue depths 1, 8, 32; then fio on one raw
# O_DIRECT file (libaio) at the same depths. Usage: B=target/release/ecstack bash nbd-iops.sh
# TESTBED=paper: the devices are EPLOG's testbed emulated instead (docs/devices.md): each file is
# wrapped in `throttled:profile=eplog-ssd` (main) or `eplog-hdd` (logs) and opened without O_DIRECT,
# so the modeled service times, not this VM's disk, set the pace; the raw-file runs are skipped.
B=${B:-target/release/ecstack}
T=${T:-/tmp/nbdt}
TESTBED=${TESTBED:-files}
mkdir -p $T
dev() { # dev <profile> <path> <size>
  if [ "$TESTBED" = paper ]; then printf "throttled:profile=$1:file:$2?size=$3"
  else printf "file:$2?size=$3&direct=1"; fi
}
for scheme in md pl eplog; do
  D=$T/$scheme; rm -rf $D; mkdir -p $D
  M=$(for i in 0 1 2 3 4 5 6 7; do dev eplog-ssd $D/m$i 256M; printf ","; done); M=${M%,}
  L=""; [ $scheme != md ] && L="--log $(dev eplog-hdd $D/l0 512M),$(dev eplog-hdd $D/l1 512M)"
  $B array create --scheme $scheme -k 6 -m 2 --main "$M" $L --meta file:$D/meta?size=256M > /dev/null || exit 1
  (timeout 200 $B array serve --meta file:$D/meta --addr 127.0.0.1:10990 --admin $D/adm.sock --workers 32 > $D/serve.log 2>&1 &)
  sleep 1
  # pre-write the region sequentially so every measured write is an update
  fio --name=pre --ioengine=nbd --uri=nbd://127.0.0.1:10990/ecstack --rw=write --bs=1M --size=64M --iodepth=4 >/dev/null 2>&1
  for qd in 1 8 32; do
    r=$(fio --name=v --ioengine=nbd --uri=nbd://127.0.0.1:10990/ecstack --rw=randwrite --bs=4k --size=64M --iodepth=$qd --runtime=5 --time_based --output-format=terse --terse-version=3 2>/dev/null | grep "^3;" | cut -d";" -f49)
    echo "$scheme qd$qd $r"
  done
  $B array status --admin $D/adm.sock | grep -E "stripe buffer|commits:"
  $B nbd admin --socket $D/adm.sock shutdown > /dev/null 2>&1; sleep 1
  rm -rf $D
done
[ "$TESTBED" = paper ] && exit 0
for qd in 1 8 32; do
  r=$(fio --name=raw --filename=$T/raw.img --size=64M --ioengine=libaio --direct=1 --rw=randwrite --bs=4k --iodepth=$qd --runtime=5 --time_based --output-format=terse --terse-version=3 2>/dev/null | grep "^3;" | cut -d";" -f49)
  echo "raw qd$qd $r"
done
rm -f $T/raw.img
