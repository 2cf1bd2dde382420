#!/usr/bin/env bash
# The pretraining comparison of this folder's README.md: each config below with seeds 0, 1 and 2 (two runs
# at a time, one torch thread each), then `decent report` over the run directories. Run
# from the repository root with the virtual environment active. The records of the runs
# quoted in this folder's README.md are in runs/ beside this script.
#   bash experiments/pretraining/run_all.sh
set -euo pipefail
here="experiments/pretraining"
out="${OUT_DIR:-runs/pretraining}"
jobs=()
for seed in 0 1 2; do
  for cfg in fedavg_star dsgd_ring gasloc_complete gasloc_ring gasloc_one_peer \
             diloco_recipe diloco_star; do
    jobs+=("$here/$cfg.yaml seed=$seed")
  done
  # DiLoCo's outer momentum 0.9 → 0.5, the rest of diloco_star.yaml kept
  jobs+=("$here/diloco_star.yaml seed=$seed name=pretrain-diloco-star-momentum-0.5 strategy.outer_momentum=0.5")
done
# the server's port as slow as a worker's (100 Mbit/s): the same training as fedavg_star's
# seed 0, only the simulated clock differs
jobs+=("$here/fedavg_star.yaml seed=0 name=pretrain-fedavg-star-server-100mbps network.nodes_csv=null")
printf '%s\n' "${jobs[@]}" | xargs -P "${PARALLEL:-2}" -I{} sh -c \
    "decent run {} tracking.out_dir=$out tracking.progress=false > /dev/null"
decent report "$out" --by name --metric gmp_loss,client_loss_mean --out "$here/report"
# (README.md's table: the same report over the committed records in $here/runs)
