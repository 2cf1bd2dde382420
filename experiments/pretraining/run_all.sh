#!/usr/bin/env bash
# Run every pretraining config (two at a time: each run uses one torch thread), then
# write the table and the plot from their run directories.
#   bash experiments/pretraining/run_all.sh [extra key=value overrides for every run]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT_DIR:-runs/pretraining}"
ls "$here"/*.yaml | xargs -P "${PARALLEL:-2}" -I{} \
    decent run {} tracking.out_dir="$out" tracking.progress=false "$@"
# DiLoCo's outer optimiser, two steps away from the paper's (lr 0.7, momentum 0.9)
decent run "$here/diloco_star.yaml" name=pretrain-diloco-star-outer-lr-0.3 \
    strategy.outer_lr=0.3 tracking.out_dir="$out" tracking.progress=false "$@" &
decent run "$here/diloco_star.yaml" name=pretrain-diloco-star-momentum-0.5 \
    strategy.outer_momentum=0.5 tracking.out_dir="$out" tracking.progress=false "$@" &
wait
python "$here/report.py" "$out"/pretrain-* --out "$here/loss_vs_bytes.png" \
    --table "$here/results.md"
