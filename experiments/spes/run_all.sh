#!/usr/bin/env bash
# Every SPES pretraining result in this folder's README.md (with the virtual environment active, as for
# every `decent` command): SPES, SPES without the merging warm-up, and FedAvg with inner
# AdamW (the paper's "DiLoCo" arm) on 4 and 8 workers, 3 seeds each, two runs at a time;
# then the report and the paired comparisons (per-seed differences, SPES − FedAvg at equal
# bytes and per round, and the warm-up's effect). The records of the runs quoted in the
# README.md are in runs/ beside this script.
#   bash experiments/spes/run_all.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT_DIR:-runs/spes}"
jobs="${JOBS:-2}"

arms() {  # one line of `decent run` arguments per run
  for seed in 0 1 2; do
    for n in 4 8; do
      common="seed=$seed topology.n=$((n + 1)) tracking.out_dir=$out tracking.progress=false"
      echo "$here/shakespeare.yaml $common name=spes-n$n-s$seed"
      echo "$here/shakespeare.yaml $common name=spes-nowarmup-n$n-s$seed strategy.merge_warmup_steps=0"
      echo "$here/shakespeare_fedavg.yaml $common name=fedavg-n$n-s$seed"
    done
  done
}
arms | xargs -P "$jobs" -L 1 decent run >/dev/null
by=(--by strategy.name,strategy.merge_warmup_steps,topology.n --metric gmp_loss)
decent report "$out" "${by[@]}" --paired strategy.name=fedavg,spes \
    --paired strategy.merge_warmup_steps=0,100 --out "$here/report"
decent report "$out" "${by[@]}" --paired strategy.name=fedavg,spes --at bytes \
    --out "$here/report/equal_bytes"
