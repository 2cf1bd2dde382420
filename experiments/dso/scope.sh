#!/usr/bin/env bash
# Top-K over the whole gradient (the report's Algorithm 1, DSO's default `scope: global`)
# against Top-K of each tensor (`per_tensor`), paired by seed on this folder's two configs
# (with the virtual environment active): digits as committed (150 rounds), Shakespeare
# shortened to 40 rounds as in the Byzantine table; 3 seeds each, two runs at a time; a run
# whose record exists is not run again. Then the paired report (per-seed differences of
# the final metric) into report_scope/. The records quoted in this folder's README.md are
# in runs/scope beside this; their reports re-made from them:
#   OUT_DIR=experiments/dso/runs/scope bash experiments/dso/scope.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT_DIR:-runs/dso-scope}"
jobs="${JOBS:-2}"
decent="${DECENT:-decent}"

arm() {  # config, name, then extra `decent run` arguments; skipped when its summary exists
  local config="$1" name="$2"
  shift 2
  compgen -G "$out/$name-*/summary.json" >/dev/null && return 0
  echo "$here/$config tracking.out_dir=$out tracking.progress=false name=$name $*"
}

arms() {
  for seed in 0 1 2; do
    for scope in global per_tensor; do
      arm digits.yaml "digits-$scope-s$seed" "seed=$seed strategy.compression.scope=$scope"
      arm shakespeare.yaml "shakespeare-$scope-s$seed" \
          "seed=$seed rounds=40 eval.every=40 strategy.compression.scope=$scope"
    done
  done
}
arms | xargs -r -P "$jobs" -L 1 $decent run >/dev/null
for family in digits shakespeare; do
  metric=$([ "$family" = digits ] && echo gmp_accuracy,gmp_loss || echo gmp_loss)
  $decent report "$out"/"$family"-* --metric "$metric" --by strategy.compression.scope \
      --paired strategy.compression.scope=per_tensor,global \
      --out "$here/report_scope/$family" >/dev/null
done
find "$here/report_scope" -name '*.png' -delete  # the tables only
sed -i '/^!\[/d' "$here"/report_scope/*/report.md
