#!/usr/bin/env bash
# The SGP comparison of this folder's README.md (with the virtual environment active):
# four arms on digits.yaml, 3 seeds each, two runs at a time, then the reports. The
# records the README quotes are in runs/ beside this script; its reports in report/ come
# from them (REPORT_ONLY=1 OUT_DIR=experiments/sgp/runs makes only the reports).
#   bash experiments/sgp/run.sh
set -euo pipefail
here="experiments/sgp"
out="${OUT_DIR:-runs/sgp}"
jobs=()
for seed in 0 1 2; do
  jobs+=("name=dsgd-exponential strategy.name=dsgd topology.name=exponential seed=$seed")
  jobs+=("name=sgp-directed-exponential seed=$seed")
  jobs+=("name=sgp-one-peer topology.name=one_peer_exponential seed=$seed")
  jobs+=("name=osgp-one-peer strategy.name=osgp topology.name=one_peer_exponential seed=$seed")
done
[ -n "${REPORT_ONLY:-}" ] || printf '%s\n' "${jobs[@]}" | xargs -P "${PARALLEL:-2}" -I{} sh -c \
    "decent run $here/digits.yaml {} tracking.out_dir=$out > /dev/null"
pairs=(--paired name=dsgd-exponential,sgp-directed-exponential
       --paired name=dsgd-exponential,sgp-one-peer --paired name=sgp-one-peer,osgp-one-peer)
report() {  # name, then decent report arguments (the arms are paired by their names)
  local name="$1"
  shift
  decent report "$out" --by name --metric gmp_loss,gmp_accuracy "$@" \
      --out "$here/report/$name" > /dev/null
}
report final "${pairs[@]}"
report bytes --at bytes "${pairs[@]}"
report sim_time --at sim_time "${pairs[@]}"
