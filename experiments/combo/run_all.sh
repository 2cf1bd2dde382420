#!/usr/bin/env bash
# Every Combo result in this folder's README.md (with the virtual environment active, as for every
# `decent` command), 3 seeds each, then the reports. The records of the runs quoted in the
# README.md are in runs/ beside this script.
#   bash experiments/combo/run_all.sh            # all five
#   bash experiments/combo/run_all.sh sync       # or one of: sync speedup segments churn replicas
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT_DIR:-runs/combo}"
what="${1:-all}"
quiet=(tracking.progress=false)

if [[ $what == all || $what == sync ]]; then  # sync time against S, beside its closed form
  for seed in 0 1 2; do
    for s in 1 2 3 4 5 6 7 8 9 10; do
      decent run "$here/sync_time.yaml" seed=$seed strategy.segments=$s \
          tracking.out_dir="$out/sync" name=S$s-s$seed "${quiet[@]}"
    done
  done
  python "$here/sync_time.py" "$out/sync" --out "$here/report/sync"
  # per-seed differences in sync time: S = 1 against 2, and where the curve flattens
  decent report "$out/sync" --by strategy.segments --metric sim_time_total_s \
      --paired strategy.segments=1,2 --paired strategy.segments=5,6 \
      --paired strategy.segments=6,10 --out "$here/report/sync/paired"
fi
if [[ $what == all || $what == speedup ]]; then  # time to 85 % against FedAvg
  for seed in 0 1 2; do
    for n in 20 30 40; do
      for p in iid dirichlet; do
        common=("$here/digits.yaml" seed=$seed topology.n=$n task.partition=$p
                tracking.out_dir="$out/speedup" "${quiet[@]}")
        decent run "${common[@]}" name=combo-n$n-$p-s$seed strategy.segments=5 \
            strategy.replicas=2
        decent run "${common[@]}" name=fedavg-n$n-$p-s$seed strategy.name=fedavg \
            topology.name=star topology.n=$((n + 1))
      done
    done
  done
  decent report "$out/speedup" --by task.partition,strategy.name,topology.n \
      --metric client_accuracy_mean,gmp_accuracy --facet task.partition \
      --color strategy.name --out "$here/report/speedup"
  python "$here/speedup.py" "$out/speedup" --out "$here/report/speedup"
fi
if [[ $what == all || $what == segments ]]; then  # accuracy per round against S
  for seed in 0 1 2; do
    for s in 1 2 4 8; do
      decent run "$here/digits.yaml" seed=$seed strategy.segments=$s strategy.replicas=2 \
          tracking.out_dir="$out/segments" name=S$s-s$seed "${quiet[@]}"
    done
  done
  decent report "$out/segments" --by strategy.segments \
      --metric client_accuracy_mean,gmp_accuracy --paired strategy.segments=1,2 \
      --paired strategy.segments=1,4 --paired strategy.segments=1,8 \
      --out "$here/report/segments"
fi
if [[ $what == all || $what == churn ]]; then  # 20 % crash at round 20, 5 join at 30
  for seed in 0 1 2; do
    decent run "$here/churn.yaml" seed=$seed tracking.out_dir="$out/churn" \
        name=churn-s$seed "${quiet[@]}"
    decent run "$here/digits.yaml" seed=$seed strategy.segments=5 strategy.replicas=2 \
        tracking.out_dir="$out/churn" name=clean-s$seed "${quiet[@]}"
  done
  decent report "$out/churn" --by topology.n --metric client_accuracy_mean,gmp_accuracy \
      --paired topology.n=30,35 --out "$here/report/churn"
fi
if [[ $what == all || $what == replicas ]]; then  # accuracy and time against R (Fig. 5)
  for seed in 0 1 2; do
    for r in 1 2 4 8 16; do
      decent run "$here/digits.yaml" seed=$seed strategy.segments=10 strategy.replicas=$r \
          tracking.out_dir="$out/replicas" name=R$r-s$seed "${quiet[@]}"
    done
  done
  # accuracy (Fig. 5a) and time to target (Fig. 5b), each paired by seed against the
  # paper's default R = 2, and R = 16 against 8
  pairs=(--paired strategy.replicas=2,1 --paired strategy.replicas=2,4
         --paired strategy.replicas=2,8 --paired strategy.replicas=2,16
         --paired strategy.replicas=8,16)
  decent report "$out/replicas" --by strategy.replicas \
      --metric client_accuracy_mean,gmp_accuracy "${pairs[@]}" --out "$here/report/replicas"
  decent report "$out/replicas" --by strategy.replicas --metric time_to_target_s \
      "${pairs[@]}" --out "$here/report/replicas/time_to_target"
fi
