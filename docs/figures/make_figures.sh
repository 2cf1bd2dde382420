#!/usr/bin/env bash
# The method pages' figures, docs/figures/<page>.png, each drawn by `decent report` from
# run records committed under experiments/. Run from the repository root:
#
#     bash docs/figures/make_figures.sh
#
# Each report goes to a temporary folder; only the one plot a page shows is copied here.
set -euo pipefail

decent=decent
if ! command -v decent >/dev/null && [ -x .venv/bin/decent ]; then
  decent=.venv/bin/decent
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

figure() {  # page, the report's plot to keep, then decent report's arguments
  local page=$1 plot=$2
  shift 2
  "$decent" report "$@" --out "$tmp/$page" >/dev/null
  cp "$tmp/$page/$plot" "docs/figures/$page.png"
  echo "docs/figures/$page.png"
}

pre=experiments/pretraining/runs
slice=experiments/seedflood/table2/cpu_slice/runs

# DSGD: gossip after every step against local updates, on the bytes each sends
figure dsgd gmp_loss_vs_bytes.png \
  "$pre"/pretrain-dsgd-ring-2* "$pre"/pretrain-gasloc-ring-2* "$pre"/pretrain-fedavg-star-2* \
  --metric gmp_loss --by strategy.name

# CHOCO-SGD: Top-1 % public copies against DSGD's whole models, full model and LoRA
figure choco gmp_accuracy_vs_bytes.png "$slice"/choco* "$slice"/dsgd* \
  --metric gmp_accuracy --by strategy.name,model.lora.enabled \
  --color strategy.name --style model.lora.enabled

# FedAvg: the star's server port on the simulated clock, against serverless GASLoC
figure fedavg gmp_loss_vs_sim_time.png \
  "$pre"/pretrain-fedavg-star-* "$pre"/pretrain-gasloc-complete-2* "$pre"/pretrain-gasloc-one-peer-2* \
  --metric gmp_loss --by name --color strategy.name

# DiLoCo: its outer Nesterov step (and its own recipe) against plain averaging
figure diloco gmp_loss_vs_rounds.png "$pre"/pretrain-diloco-* "$pre"/pretrain-fedavg-star-2* \
  --metric gmp_loss --by name --color strategy.name

# GASLoC: the graph it gossips on, against FedAvg's star, on the bytes each sends
figure gasloc gmp_loss_vs_bytes.png "$pre"/pretrain-gasloc-* "$pre"/pretrain-fedavg-star-2* \
  --metric gmp_loss --by strategy.name,topology.name --color strategy.name

# Combo: time to accuracy against FedAvg, one panel per data partition
figure combo client_accuracy_mean_vs_sim_time.png experiments/combo/runs/speedup \
  --metric client_accuracy_mean --by task.partition,strategy.name,topology.n \
  --facet task.partition --color strategy.name

# SPES: loss against bytes, one panel per number of clients (the server counted)
figure spes gmp_loss_vs_bytes.png experiments/spes/runs \
  --metric gmp_loss --by strategy.name,strategy.merge_warmup_steps,topology.n \
  --facet topology.n --color strategy.name --style strategy.merge_warmup_steps

# DSO: reward models (ASO) through its pipeline, 2 of 10 participants scaling by −4,
# against a plain mean of the same payloads (the Byzantine sweep's records hold one
# evaluation per run, the final one: a table, not a curve)
figure dso gmp_accuracy_vs_rounds.png experiments/dso/runs/aso \
  --metric gmp_accuracy --by strategy.aggregator,faults.byzantine_fraction \
  --color strategy.aggregator --style faults.byzantine_fraction

# SeedFlood: delayed flooding (k sends per iteration; hops=0: the diameter) and DZSGD
figure seedflood gmp_loss_vs_rounds.png experiments/seedflood/delayed/runs \
  --metric gmp_loss --by strategy.name,strategy.hops

# Zeroth order: the same MeZO steps flooded as seeds or gossiped as whole models
# (SeedFlood with full flooding, hops=0), on the bytes each sends
figure zeroth-order gmp_loss_vs_bytes.png \
  experiments/seedflood/delayed/runs/dzsgd-* experiments/seedflood/delayed/runs/hops0-* \
  --metric gmp_loss --by strategy.name
