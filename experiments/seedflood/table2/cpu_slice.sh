#!/usr/bin/env bash
# A CPU-sized slice of the Table 2 sweeps: every method of the table on one cell of its
# grid (a ring of 16, SST-2, the first lr of each grid) at 1/50 of its iterations, with
# the random test model tiny-opt instead of OPT-125M and SST-2 from a local folder; 3
# seeds. It checks that each sweep runs end to end and measures its bytes; a random model
# classifies at chance, so its accuracy says nothing about the methods. The committed records
# were made with batches drawn with replacement and no validation selection, and SeedFlood's
# SubCGE over the Linear layers (strategy.layers linear), as set below.
# Run from the
# repository root with the virtual environment active:
#   bash experiments/seedflood/table2/cpu_slice.sh [DATA_DIR]   (default ../shared/data)
set -euo pipefail
here="experiments/seedflood/table2"
data="$(cd "${1:-../shared/data}" && pwd)"
out="${OUT_DIR:-runs/table2-slice}"
slice() {  # method, rounds, lr, [overrides of that method]
  decent sweep "$here/$1.yaml" backend=local ray.num_gpus_per_actor=0 model.path=tiny-opt \
      task.data_dir="$data" rounds="$2" eval.every="$2" task.sampling=replacement \
      eval.select=none "${@:4}" --seeds 3 --dir "$out/$1" \
      --grid topology.name=ring topology.n=16 task.name=sst2 strategy.lr="$3" > /dev/null
}
slice seedflood 100 1e-5 strategy.layers=linear
slice dzsgd 20 1e-5
slice dsgd 2 1e-4
slice dsgd_lora 2 1e-2
slice choco 2 1e-4
slice choco_lora 2 1e-2
decent report "$out" --by strategy.name,model.lora.enabled --out "$here/cpu_slice"
# (experiments/seedflood/README.md's table: the same report over the committed records in $here/cpu_slice/runs)
