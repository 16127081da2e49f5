#!/bin/bash
# fio (nbd engine) random writes with crc32c verify over `ecstack array serve`, per scheme,
# then verify-only reads after a device failure and after the rebuild.
B=${B:-target/release/ecstack}
set -u
for scheme in md pl eplog; do
  D=/tmp/fioarr-$scheme; rm -rf $D; mkdir -p $D
  M=$(for i in 0 1 2 3 4 5 6 7; do printf "file:$D/m$i?size=24M&direct=1,"; done); M=${M%,}
  L=""; [ $scheme != md ] && L="--log file:$D/l0?size=24M&direct=1,file:$D/l1?size=24M&direct=1"
  $B array create --scheme $scheme -k 6 -m 2 --main "$M" $L --meta file:$D/meta?size=64M > /dev/null || exit 1
  timeout 300 $B array serve --meta file:$D/meta --addr 127.0.0.1:10988 --admin $D/adm.sock > $D/serve.log 2>&1 &
  sleep 1
  U=nbd://127.0.0.1:10988/ecstack
  F="--name=v --ioengine=nbd --uri=$U --rw=randwrite --bs=4k --size=64M --iodepth=8 --verify=crc32c --verify_fatal=1 --randrepeat=1 --output-format=terse --terse-version=3 --verify_state_save=0"
  fio $F --do_verify=1 > $D/fio1.txt 2>&1; r1=$?
  iops=$(grep "^3;" $D/fio1.txt | cut -d";" -f49 | head -1)
  $B array fail 3 --admin $D/adm.sock > /dev/null
  $B array fail log0 --admin $D/adm.sock > /dev/null 2>&1 || $B array fail 7 --admin $D/adm.sock > /dev/null
  fio $F --verify_only=1 > $D/fio2.txt 2>&1; r2=$?
  $B array rebuild 3 --admin $D/adm.sock > /dev/null
  $B array rebuild log0 --admin $D/adm.sock > /dev/null 2>&1 || $B array rebuild 7 --admin $D/adm.sock > /dev/null
  fio $F --verify_only=1 > $D/fio3.txt 2>&1; r3=$?
  $B nbd admin --socket $D/adm.sock shutdown > /dev/null 2>&1; sleep 1
  echo "$scheme: write+verify rc=$r1 (write IOPS $iops), degraded verify rc=$r2, rebuilt verify rc=$r3"
  rm -rf $D
done
# Baseline: fio on one raw file with O_DIRECT, same job shape.
rm -f /tmp/fio-raw.img
fio --name=raw --filename=/tmp/fio-raw.img --size=64M --ioengine=libaio --direct=1 --rw=randwrite --bs=4k --iodepth=8 --randrepeat=1 --output-format=terse --terse-version=3 2>/dev/null | grep "^3;" | cut -d";" -f49 | sed 's/^/raw file (libaio, O_DIRECT, iodepth 8) write IOPS /'
rm -f /tmp/fio-raw.img
