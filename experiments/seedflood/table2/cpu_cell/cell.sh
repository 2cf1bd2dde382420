#!/usr/bin/env bash
# One cell of Table 2 on a CPU, bounded (a ring of 16 on SST-2, SmolLM2-135M's real
# weights for OPT-125M, 10 steps per client): SeedFlood, DZSGD and DSGD-LoRA, 3 seeds
# each, every run evaluated on its 500 test examples before training and after, so the
# arms pair by seed on the same examples. About 1 h on 2 cores (DZSGD's 16 whole models
# take 18 GB of memory).
# Run from the repository root with the virtual environment active:
#   bash experiments/seedflood/table2/cpu_cell/cell.sh [DATA_DIR] [METHODS]
#   (default ../shared/data and "seedflood dzsgd dsgd_lora"), then
#   decent report runs/table2-cell --by strategy.name --at bytes ...   (see the README)
set -euo pipefail
here="experiments/seedflood/table2/cpu_cell"
data="$(cd "${1:-../shared/data}" && pwd)"
out="${OUT_DIR:-runs/table2-cell}"
for method in ${2:-seedflood dzsgd dsgd_lora}; do
  for seed in 0 1 2; do
    decent run "$here/$method.yaml" task.data_dir="$data" seed="$seed" \
        name="$method-s$seed" tracking.out_dir="$out/$method" > /dev/null
  done
done
