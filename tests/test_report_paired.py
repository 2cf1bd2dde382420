"""``decent report --paired KEY=A,B``: per-seed differences between two arms, at the end of
the runs and at an equal budget, on hand-made run records with known curves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from decent.tools.cli import main
from decent.tools.report_paired import paired, value_at
from decent.tools.run_records import find_runs


def record(root: Path, name: str, strategy: dict, seed: int,
           curve: list[tuple[float, float]]) -> None:
    """A finished run: ``curve`` = (bytes_total, gmp_loss) at each evaluated round."""
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(
        {"name": name, "seed": seed, "strategy": strategy, "topology": {"n": 5}}))
    rows = [{"round": r, "bytes_total": b, "sim_time_total_s": b / 100, "gmp_loss": y}
            for r, (b, y) in enumerate(curve)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "summary.json").write_text(json.dumps(
        {"gmp_loss": curve[-1][1], "bytes_total": curve[-1][0], "max_edge_bytes_total": 1,
         "sim_time_total_s": curve[-1][0] / 100}))


@pytest.fixture
def runs(tmp_path):
    # FedAvg sends 1000 bytes a round, SPES 600 (with and without warm-up)
    for seed, shift in ((0, 0.0), (1, 0.1), (2, -0.05)):
        record(tmp_path, f"fedavg-s{seed}", {"name": "fedavg"}, seed,
               [(1000, 3.0 + shift), (2000, 2.6 + shift), (3000, 2.4 + shift)])
        for warm, bonus in ((100, 0.02), (0, 0.0)):
            record(tmp_path, f"spes-w{warm}-s{seed}",
                   {"name": "spes", "merge_warmup_steps": warm}, seed,
                   [(600, 3.1 + shift + bonus * seed), (1200, 2.8 + shift),
                    (1800, 2.65 + shift + bonus * seed)])
    return tmp_path


def test_value_at_interpolates_linearly_and_never_extrapolates(runs):
    (fedavg,) = [r for r in find_runs([str(runs)]) if r.path.name == "fedavg-s0"]
    assert value_at(fedavg, "gmp_loss", "bytes_total", 1800) == pytest.approx(2.6 + 0.4 * 0.2)
    assert value_at(fedavg, "gmp_loss", "bytes_total", 2000) == pytest.approx(2.6)
    assert value_at(fedavg, "gmp_loss", "bytes_total", 500) is None
    assert value_at(fedavg, "gmp_loss", "bytes_total", 3500) is None


def test_an_initial_evaluation_starts_the_curve_at_zero_bytes(runs):
    """With eval.initial the model before training is the curve's point at 0 bytes: a
    budget below the first round's bytes is read between it and that round."""
    (fedavg,) = [r for r in find_runs([str(runs)]) if r.path.name == "fedavg-s0"]
    fedavg.summary["initial_gmp_loss"] = 3.4
    assert value_at(fedavg, "gmp_loss", "bytes_total", 0) == pytest.approx(3.4)
    assert value_at(fedavg, "gmp_loss", "bytes_total", 250) == pytest.approx(3.4 - 0.4 / 4)
    assert value_at(fedavg, "gmp_loss", "bytes_total", 1800) == pytest.approx(2.6 + 0.4 * 0.2)


def test_paired_differences_at_the_end_and_at_equal_bytes(runs):
    found = find_runs([str(runs)])
    keys = ["strategy.name", "strategy.merge_warmup_steps"]
    final = paired(found, keys, "strategy.name=fedavg,spes", "gmp_loss", "final")
    # warm-up 100, per seed: (2.65 + 0.02·s) − 2.4 → +0.25, +0.27, +0.29: FedAvg ahead on all
    assert "| strategy.merge_warmup_steps=100 | 3 |" in final
    assert "s0: +0.25, s1: +0.27, s2: +0.29" in final and "| +0.27 ± 0.02 | 0/3 |" in final
    at_bytes = paired(found, keys, "strategy.name=fedavg,spes", "gmp_loss", "bytes")
    # at SPES's 1800 bytes FedAvg is at 2.68 + shift: SPES − FedAvg = −0.03 + 0.02·s
    row = next(line for line in at_bytes.splitlines() if "merge_warmup_steps=100" in line)
    assert "s0: -0.03, s1: -0.01, s2: +0.01" in row and "| 2/3 |" in row
    assert row.rstrip().endswith("| 1800 |")
    row0 = next(line for line in at_bytes.splitlines() if "merge_warmup_steps=0 |" in line)
    assert "| -0.03 ± 0 | 3/3 |" in row0  # every seed −0.03: no spread


def test_paired_on_the_command_line_and_bad_specs(runs, capsys):
    out = runs / "rep"
    assert main(["report", str(runs), "--metric", "gmp_loss", "--by",
                 "strategy.name,strategy.merge_warmup_steps", "--paired",
                 "strategy.merge_warmup_steps=0,100", "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "Paired by seed: gmp_loss of strategy.merge_warmup_steps=100 minus" in text
    assert "s0: +0, s1: +0.02, s2: +0.04" in text
    for spec, says in (("strategy.name=fedavg", "KEY=A,B"),
                       ("strategy.name=fedavg,diloco", "no run has strategy.name=diloco"),
                       ("strategy.lr=1,2", "not a config key")):
        assert main(["report", str(runs), "--metric", "gmp_loss", "--paired", spec,
                     "--out", str(runs / "bad")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "--paired" in err and says in err
    assert not (runs / "bad").exists()


def test_a_lower_time_is_ahead(runs):
    found = find_runs([str(runs)])
    text = paired(found, ["strategy.name", "strategy.merge_warmup_steps"],
                  "strategy.name=fedavg,spes", "sim_time_total_s", "final")
    assert "negative is spes ahead" in text
    row = next(line for line in text.splitlines() if "merge_warmup_steps=0 |" in line)
    assert "| -12 ± 0 | 3/3 |" in row  # 18 s against 30 s on every seed


def test_rows_come_in_numeric_order(tmp_path):
    for r in (16, 2, 1, 8):
        record(tmp_path, f"r{r}", {"name": "combo", "replicas": r}, 0, [(100, 1.0 / r)])
    out = tmp_path / "rep"
    assert main(["report", str(tmp_path), "--metric", "gmp_loss", "--by",
                 "strategy.replicas", "--out", str(out)]) == 0
    rows = [line.split(" | ")[0] for line in (out / "report.md").read_text().splitlines()
            if line.startswith("| strategy.replicas=")]
    assert rows == [f"| strategy.replicas={r}" for r in (1, 2, 8, 16)]


def test_a_part_is_grouped_and_paired_by_its_name_whatever_the_record_stored(tmp_path,
                                                                             capsys):
    """`strategy.aggregator` names the part, as on the command line: a record storing it
    as a section with fields and one storing the bare name (written before parts had
    fields) group together, and default grouping shows it once."""
    for seed in (0, 1):
        record(tmp_path, f"mean-s{seed}", {"name": "dso", "aggregator": {"name": "mean"}},
               seed, [(1000, 3.0 + seed)])
        record(tmp_path, f"trim-s{seed}", {"name": "dso", "aggregator": {
            "name": "trimmed_mean", "trim": 0.1}}, seed, [(1000, 2.9 + seed)])
    record(tmp_path, "old-s2", {"name": "dso", "aggregator": "trimmed_mean"}, 2,
           [(1000, 4.0)])
    runs = find_runs([str(tmp_path)])
    assert {r.config["strategy.aggregator"] for r in runs} == {"mean", "trimmed_mean"}
    table = paired(runs, ["strategy.aggregator"], "strategy.aggregator=mean,trimmed_mean",
                   "gmp_loss", "final")
    assert "| 2 |" in table and "s0: -0.1, s1: -0.1" in table
    assert main(["report", str(tmp_path), "--metric", "gmp_loss", "--by",
                 "strategy.aggregator", "--out", str(tmp_path / "by")]) == 0
    assert "| strategy.aggregator=trimmed_mean | 3 |" in \
        (tmp_path / "by" / "report.md").read_text()
    assert main(["report", str(tmp_path), "--metric", "gmp_loss",
                 "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "report.md").read_text()
    assert "| strategy.aggregator / strategy.aggregator.trim |" in text
    assert "aggregator.name" not in text
