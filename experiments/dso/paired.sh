#!/usr/bin/env bash
# The paired readings this folder's README.md quotes for the Byzantine and ASO tables (with the virtual
# environment active): per-seed differences of the final metric between two arms that
# share a seed (`decent report --paired`), from the committed records. Each writes its
# tables to report_paired/<name>/report.md.
#   bash experiments/dso/paired.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."  # paths in the reports relative to the repository
here=experiments/dso
runs="$here/runs/byzantine"
out="$here/report_paired"
report() {  # name, then decent report arguments; keeps report.md only
  local name="$1"
  shift
  decent report "$@" --metric gmp_loss --out "$out/$name" >/dev/null
}
# every rule against its own runs without a Byzantine worker (listed under sign_flip)
report sign_flip "$runs" --by strategy.aggregator,strategy.verify_commitments,faults.attack.name \
    --paired faults.byzantine_fraction=0.0,0.05 --paired faults.byzantine_fraction=0.0,0.1 \
    --paired faults.byzantine_fraction=0.0,0.2 --paired faults.byzantine_fraction=0.0,0.3
for attack in scale gaussian; do
  report "$attack" "$runs"/*-clean-* "$runs"/*-"$attack"-* \
      --by strategy.aggregator,strategy.verify_commitments \
      --paired faults.byzantine_fraction=0.0,0.05 --paired faults.byzantine_fraction=0.0,0.1 \
      --paired faults.byzantine_fraction=0.0,0.2 --paired faults.byzantine_fraction=0.0,0.3
done
report random "$runs"/*-clean-* "$runs"/*-random-* \
    --by strategy.aggregator,strategy.verify_commitments \
    --paired faults.byzantine_fraction=0.0,0.1 --paired faults.byzantine_fraction=0.0,0.3
report forge "$runs"/dso-clean-* "$runs"/dso-forge-* --by strategy.aggregator \
    --paired faults.byzantine_fraction=0.0,0.05 --paired faults.byzantine_fraction=0.0,0.1 \
    --paired faults.byzantine_fraction=0.0,0.2 --paired faults.byzantine_fraction=0.0,0.3
# an unchecked forgery against a committed sign flip, both under trimmed mean
report forge_vs_flip "$runs"/trimmed-forge-* "$runs"/dso-sign_flip-* \
    --by faults.byzantine_fraction --paired faults.attack.name=sign_flip,forge
# the median against the mean with no Byzantine worker
report median_vs_mean "$runs"/mean-clean-* "$runs"/median-clean-* \
    --by faults.byzantine_fraction --paired strategy.aggregator=mean,median
# ASO: trimmed mean against the mean under attack, and trimmed mean with and without attack
decent report "$here/runs/aso" --metric gmp_accuracy,gmp_loss \
    --by faults.byzantine_fraction --paired strategy.aggregator=mean,trimmed_mean \
    --out "$out/aso_rule" >/dev/null
decent report "$here/runs/aso"/aso-dso-* --metric gmp_accuracy,gmp_loss \
    --by strategy.aggregator --paired faults.byzantine_fraction=0.0,0.2 \
    --out "$out/aso_attack" >/dev/null
find "$out" -name '*.png' -delete  # the tables only: the plots are in report/ and report_aso/
sed -i '/^!\[/d' "$out"/*/report.md
