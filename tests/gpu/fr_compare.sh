#!/bin/bash
# The torchfrtrace side of docs/FLIGHT-RECORDER.md, on a machine with PyTorch (run from the repo
# root): makes the extra gloo fixtures (fr_more_dumps.py), the relabelled and NCCL variants
# (fr_variants.py), runs torchfrtrace on every folder with and without --allow-incomplete-ranks,
# and packs it all into OUT/fr.tar.gz.  usage: tests/gpu/fr_compare.sh SCRIPTS OUT
set -u
s=$1; out=$2; w=$(mktemp -d)
mkdir -p $w/new $w/all $w/tft
PYTHONUNBUFFERED=1 python3 $s/fr_more_dumps.py $w/new > $w/gen.log 2>&1
cp -r tests/data/fr/. $w/all/; cp -r $w/new/. $w/all/
python3 $s/fr_variants.py $w/all tests/data/snapshots $w/frv >> $w/gen.log 2>&1
for d in $w/all/* $w/frv/as_nccl/* $w/frv/nccl/*; do
  [ -d "$d" ] || continue
  tag=$(basename $(dirname $d))_$(basename $d)
  ( for flag in "" "--allow-incomplete-ranks"; do
      echo "\$ python -m torch.distributed.flight_recorder.fr_trace $flag -p nccl_trace_rank_ $(basename $d)"
      timeout 90 python3 -m torch.distributed.flight_recorder.fr_trace $flag -p nccl_trace_rank_ $d 2>&1 | tail -60
    done ) > $w/tft/$tag.txt 2>&1 &
done
wait
tar -C $w -czf $out/fr.tar.gz new frv tft gen.log
ls -la $out; tail -20 $w/gen.log
