#!/usr/bin/env bash
# The fault comparison of this folder's README.md: DSGD on digits, clean and with faults, 3 seeds each, then
# the report (with the virtual environment active, as for every `decent` command). The
# records of the runs quoted in this folder's README.md are in runs/ beside this script.
#   bash experiments/faults/run_all.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT_DIR:-runs/faults}"
for seed in 0 1 2; do
  common=("$here/digits.yaml" seed=$seed tracking.out_dir="$out" tracking.progress=false)
  decent run "${common[@]}" name=clean-s$seed
  decent run "${common[@]}" name=drop20-s$seed faults.drop=0.2
  decent run "${common[@]}" name=signflip20-s$seed faults.byzantine_fraction=0.2
  decent run "${common[@]}" name=drop20-signflip20-s$seed faults.drop=0.2 \
      faults.byzantine_fraction=0.2
done
decent report "$out" --by faults.drop,faults.byzantine_fraction --out "$here/report"
