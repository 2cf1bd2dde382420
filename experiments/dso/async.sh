#!/usr/bin/env bash
# DSO's asynchronous option against the synchronous method in this folder's README.md (with the virtual
# environment active): async_digits.yaml with strategy.asynchronous true and false, 3
# seeds, one run at a time, for about the same simulated time (150 synchronous rounds of
# ~4 s, 540 asynchronous ticks of ~1.1 s); then the report (accuracy, simulated time to
# 85 %, staleness), with the accuracy paired by seed at equal simulated time.
#   bash experiments/dso/async.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT_DIR:-runs/dso-async}"
for seed in 0 1 2; do
  for mode in "true 540" "false 150"; do
    set -- $mode
    decent run "$here/async_digits.yaml" seed=$seed strategy.asynchronous=$1 rounds=$2 \
        name=async-$1-s$seed tracking.out_dir="$out" tracking.progress=false >/dev/null
  done
done
decent report "$out" --by strategy.asynchronous \
    --metric gmp_accuracy,staleness_run,sim_compute_total_s \
    --paired strategy.asynchronous=False,True --at sim_time --out "$here/report_async"
