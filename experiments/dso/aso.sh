#!/usr/bin/env bash
# The ASO result in this folder's README.md (with the virtual environment active): 10 participants
# train a reward model through the DSO pipeline (aso_shakespeare.yaml), 3 seeds, with no
# Byzantine participant, and with 2 of the 10 scaling what they send by −4 against DSO
# (trimmed mean, commitments checked) and against a plain mean. One run at a time; a run
# whose record exists in the output folder is not run again. Then the report.
#   bash experiments/dso/aso.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT_DIR:-runs/dso-aso}"
jobs="${JOBS:-1}"

arm() {  # name, then extra `decent run` arguments; skipped when its summary exists
  local name="$1"
  shift
  compgen -G "$out/$name-*/summary.json" >/dev/null && return 0
  echo "$here/aso_shakespeare.yaml tracking.out_dir=$out tracking.progress=false" \
       "name=$name $*"
}

arms() {
  for seed in 0 1 2; do
    arm "aso-dso-clean-s$seed" "seed=$seed"
    scale="seed=$seed faults.byzantine_fraction=0.2 faults.attack.name=scale"
    arm "aso-dso-scale-s$seed" "$scale"
    arm "aso-mean-scale-s$seed" "$scale strategy.aggregator=mean" \
        "strategy.verify_commitments=false"
  done
}
arms | xargs -r -P "$jobs" -L 1 decent run >/dev/null
decent report "$out" --by strategy.aggregator,faults.byzantine_fraction \
    --metric gmp_accuracy,gmp_loss,initial_gmp_accuracy,initial_gmp_loss --out "$here/report_aso"
