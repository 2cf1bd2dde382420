"""``decent doctor --gpu``: one line and exit 0 without a GPU; the checks' comparisons
themselves, rehearsed on the CPU (the same runs with ``device: cpu`` and no GPU share),
must pass where the platform is deterministic and fail where it is not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from decent.tools import gpu_check
from decent.tools.cli import main
from decent.tools.gpu_check import Outcome, run_checks, table


def test_without_a_gpu_doctor_says_so_in_one_line_and_exits_0(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["doctor", "--gpu"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("doctor: python ") and "0 CUDA device(s)" in out[0]
    assert out[1:] == ["gpu check: no CUDA device here (torch.cuda.is_available() is "
                       "False); nothing to check"]


def test_rdt_over_nccl_needs_two_gpus_and_says_so(tmp_path):
    got = gpu_check.rdt_payloads(tmp_path, "cuda", 1)
    assert got == Outcome("RDT over NCCL", None, "needs 2 GPUs (NCCL puts one rank per GPU); "
                          "this machine has 1")


@pytest.mark.slow
def test_the_checks_rehearsed_on_cpu_pass_and_a_broken_one_fails(ray_session, monkeypatch):
    said: list[str] = []

    def broken(out: Path, device: str, gpus: int) -> Outcome:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    outcomes = run_checks("cpu", 0, [gpu_check.fractional_actors,
                                     gpu_check.subcge_on_device,
                                     gpu_check.defaults_on_shared_gpu,
                                     gpu_check.push_sum_on_device, broken],
                          say=said.append)
    fractional, subcge, defaults, push_sum, failed = outcomes
    assert fractional.passed, fractional.figures
    assert fractional.figures.startswith("4 actors × 0 GPU; Ray ≡ local on cpu: "
                                         "bit-identical; |Δ| from CPU ≤ 0")
    assert subcge.passed, subcge.figures
    assert subcge.figures == ("two runs bit-identical: yes; 2 per actor ≡ local: yes; "
                              "4 per actor ≡ local: yes; replicas identical: yes")
    # the default path: memory plan on, payloads above the RDT threshold, auto transport
    assert defaults.passed, defaults.figures
    assert defaults.figures.startswith("4 actors × 0 GPU, memory plan on, ~4 MB payloads; "
                                       "path: object store; Ray ≡ local: bit-identical; probe ")
    # SGP and OSGP on a directed graph, batched: Ray ≡ local, sequential within 1e-5
    assert push_sum.passed, push_sum.figures
    assert [part.split(",")[0] for part in push_sum.figures.split("; ")] == [
        "sgp: Ray ≡ local bit-identical", "osgp: Ray ≡ local bit-identical"]
    assert failed == Outcome("broken", False, "raised RuntimeError: CUDA error: an illegal "
                             "memory access was encountered")
    assert [line.split(" (")[0] for line in said] == [
        "fractional GPU actors: pass", "SubCGE on cpu: pass", "defaults on shared GPU: pass",
        "push-sum batched on cpu: pass", "broken: FAIL"]
    # a failure's figures come with its line: a run cut short never prints the table
    assert said[-1].endswith("): raised RuntimeError: CUDA error: an illegal memory access "
                             "was encountered")
    printed = table(outcomes, "a CPU").splitlines()
    assert printed[0] == "GPU acceptance on a CPU"
    assert printed[3].split()[:2] == ["SubCGE", "on"] and " pass " in printed[3]
    assert " FAIL " in printed[6]
    # a replica that differs is seen
    assert not gpu_check.identical_replicas({0: np.zeros(3), 1: np.array([0, 0, 1e-7])})


def test_the_throughput_table_prints_both_modes_and_their_ratio():
    """The doctor's throughput slice: one line per workload and dtype, the ratio of the
    two modes' medians (the measurement itself is paired and run by the benchmark)."""
    from decent.tools.throughput import Figures, Row
    from decent.tools.throughput import table as throughput_table

    row = Row("MLP quick start, 1024 clients", "float32",
              Figures(2.0, 500.0, None, None, None), Figures(0.25, 4000.0, 812.0, 0.71, 0.12))
    lines = throughput_table([row], "an H100").splitlines()
    assert lines[0].startswith("throughput on an H100") and len(lines) == 3
    cells = lines[2].split()
    assert "8.00×" in cells and "812" in cells and "71" in cells and "12" in cells


def test_model_flops_count_the_tokens_run_not_the_padding():
    """The MFU's FLOPs: 2 · N_body per real token (the mask's ones; the decoder's weights
    without its embedding tables) and 2 · N_head per position the LM head ran, tripled
    under autograd for a model whose every weight trains; counted from an independent
    sum over the tiny OPT's modules."""
    import torch

    from decent.models.tiny import build_tiny
    from decent.tools.throughput import TokenCount

    torch.manual_seed(0)
    model = build_tiny("tiny-opt")
    body = model.model.decoder
    n_body = sum(p.numel() for name, p in body.named_parameters()
                 if not name.startswith(("embed_tokens", "embed_positions")))
    n_head = model.lm_head.weight.numel()
    ids = torch.randint(3, 100, (3, 7))
    mask = torch.ones_like(ids)
    mask[0, 4:] = 0  # 3 padded positions
    mask[2, 6:] = 0  # and 1 more: 17 real tokens of 21
    counter = TokenCount([model, model])  # the same model twice: hooked once
    try:
        with torch.no_grad():
            model.model(input_ids=ids, attention_mask=mask)  # the decoder alone
        assert counter.take() == 2.0 * n_body * 17
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask)  # decoder and head on 21 positions
        assert counter.take() == 2.0 * n_body * 17 + 2.0 * n_head * 21
        model(input_ids=ids, attention_mask=mask).logits.sum().backward()
        assert counter.take() == 3 * (2.0 * n_body * 17 + 2.0 * n_head * 21)
    finally:
        counter.close()
    model(input_ids=ids, attention_mask=mask)
    assert counter.take() == 0.0
