#!/usr/bin/env bash
# The Byzantine table in this folder's README.md (with the virtual environment active, as for every
# `decent` command): tiny-llama on Shakespeare on two tiers (shakespeare.yaml, shortened to
# 40 rounds), 3 seeds, each attack at 5/10/20/30 % Byzantine workers against
#   mean, median          — no commitments checked;
#   dso                   — trimmed mean (β = 0.1) with commitments checked;
#   trimmed mean alone    — commitments not checked;
# and each at 0 % (listed under sign_flip). Trimmed mean alone runs only against `forge`
# (and not at 0 %): without forgery, checking commitments changes nothing, and the run is
# the dso row's. Against `forge` mean and median are not run (without checks a forged
# payload is a sign-flipped one); `random` (a payload of N(0, 1) noise) runs at 10 and
# 30 % only. The 0, 10 and 30 % runs go first, then 5 and 20 %. Two runs at a time; a run
# whose record exists in the output folder is not run again.
# Then the report. The records quoted in this folder's README.md are in runs/byzantine beside this.
#   bash experiments/dso/byzantine.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT_DIR:-runs/dso-byzantine}"
jobs="${JOBS:-2}"

arm() {  # name, then extra `decent run` arguments; skipped when its summary exists
  local name="$1"
  shift
  compgen -G "$out/$name-*/summary.json" >/dev/null && return 0
  echo "$here/shakespeare.yaml rounds=40 eval.every=40 tracking.out_dir=$out" \
       "tracking.progress=false name=$name $*"
}

arms() {  # one line of `decent run` arguments per run: 0, 10 and 30 % first
  for fractions in "0.0 0.1 0.3" "0.05 0.2"; do
    for attack in sign_flip scale forge gaussian random; do
      for seed in 0 1 2; do
        for f in $fractions; do
          [ "$attack" = random ] && [ "$fractions" = "0.05 0.2" ] && continue
          a="seed=$seed faults.byzantine_fraction=$f faults.attack.name=$attack"
          if [ "$f" = 0.0 ]; then  # no Byzantine worker: one run per row, not per attack
            [ "$attack" = sign_flip ] || continue
            a="seed=$seed faults.byzantine_fraction=0.0"
            arm "mean-clean-f$f-s$seed" "$a strategy.aggregator=mean" \
                "strategy.verify_commitments=false"
            arm "median-clean-f$f-s$seed" "$a strategy.aggregator=median" \
                "strategy.verify_commitments=false"
            arm "dso-clean-f$f-s$seed" "$a"
            continue
          fi
          if [ "$attack" != forge ]; then
            arm "mean-$attack-f$f-s$seed" "$a strategy.aggregator=mean" \
                "strategy.verify_commitments=false"
            arm "median-$attack-f$f-s$seed" "$a strategy.aggregator=median" \
                "strategy.verify_commitments=false"
          else
            arm "trimmed-$attack-f$f-s$seed" "$a strategy.verify_commitments=false"
          fi
          arm "dso-$attack-f$f-s$seed" "$a"
        done
      done
    done
  done
}
arms | xargs -r -P "$jobs" -L 1 decent run >/dev/null
decent report "$out" --by strategy.aggregator,strategy.verify_commitments,faults.attack.name \
    --columns faults.byzantine_fraction --metric gmp_loss --out "$here/report"
