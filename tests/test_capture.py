"""``execution.compile``: a batched chunk's gradient step compiled once (its shapes are
fixed) agrees with the eager step within rounding; a step the compiler refuses, and a
chunk whose work cannot be captured, run eagerly after one line saying why."""

from __future__ import annotations

import numpy as np
import pytest

from decent.core.errors import ConfigError
from decent.engine import capture
from decent.engine.config import from_dict
from tests.helpers import rows_and_vectors, tiny
from tests.test_batched import group_after, lora_config

# A compiled step fuses the MLP's element-wise work and sums in another order: after
# four rounds of momentum SGD the parameters move by at most a few float32 ulps
# (measured 6e-8); a wrong step or a stale captured input is ≥ 1e-3
COMPILED_ATOL = 1e-6


def mlp_config(tmp_path, compile_: bool):
    return from_dict(tiny(tmp_path, rounds=4, topology={"name": "ring", "n": 6},
                          strategy={"name": "dsgd", "local_steps": 3, "lr": 0.1,
                                    "momentum": 0.9, "weight_decay": 1e-3},
                          execution={"mode": "batched", "compile": compile_}))


@pytest.fixture(autouse=True)
def one_compile_thread():
    """Inductor compiles in this process: by default it starts a pool of compile workers,
    one a CPU, which would take the cores from the tests running beside this one."""
    from torch._inductor import config

    with config.patch(compile_threads=1):
        yield


def counting(into: list[int], inner):
    """A torch.compile backend that counts the graphs it is given and hands them on."""
    def backend(gm, example_inputs):
        into.append(len(list(gm.graph.nodes)))
        return inner(gm, example_inputs)
    return backend


def test_a_compiled_chunk_is_compiled_once_and_equals_eager_within_rounding(
        tmp_path, monkeypatch, capsys):
    from torch._inductor.compile_fx import compile_fx

    graphs: list[int] = []
    monkeypatch.setattr(capture, "BACKEND", counting(graphs, compile_fx))
    eager_rows, eager = rows_and_vectors(mlp_config(tmp_path, False))
    rows, vectors = rows_and_vectors(mlp_config(tmp_path, True))
    # 4 rounds × 3 steps through one captured graph: the shapes never change
    assert len(graphs) == 1 and graphs[0] > 10
    assert "execution.compile" not in capsys.readouterr().err
    for a, b in zip(eager_rows, rows, strict=True):
        for key, value in a.items():
            assert b[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    for cid, vec in eager.items():
        np.testing.assert_allclose(vectors[cid], vec, rtol=0, atol=COMPILED_ATOL)


def test_a_step_the_compiler_refuses_runs_eagerly_after_one_line(tmp_path, monkeypatch,
                                                                   capsys):
    def refusing(gm, example_inputs):
        raise RuntimeError("no C++ compiler here\nsecond line")

    monkeypatch.setattr(capture, "BACKEND", refusing)
    monkeypatch.setattr(capture, "_said", set())
    eager_rows, eager = rows_and_vectors(mlp_config(tmp_path, False))
    rows, vectors = rows_and_vectors(mlp_config(tmp_path, True))
    said = [line for line in capsys.readouterr().err.splitlines()
            if line.startswith("execution.compile")]
    assert len(said) == 1 and "could not be compiled" in said[0] \
        and "no C++ compiler here" in said[0] and said[0].endswith("running eagerly")
    assert rows == eager_rows  # eager from then on: the very same arithmetic
    for cid, vec in eager.items():
        np.testing.assert_array_equal(vectors[cid], vec)


def test_what_cannot_be_captured_says_why(tmp_path, monkeypatch, capsys):
    with pytest.raises(ConfigError) as err:
        from_dict(tiny(tmp_path, execution={"mode": "sequential", "compile": True}))
    assert err.value.field == "execution.compile" and "batched" in str(err.value)
    monkeypatch.setattr(capture, "_said", set())
    # under auto, local steps with a z-loss term run one client after another
    group_after(from_dict(tiny(tmp_path, strategy={"name": "dsgd", "logit_z_loss": 1e-4},
                               execution={"mode": "auto", "compile": True})), 0)
    cfg = lora_config(tmp_path, "batched", {"optimizer": "sgd", "lr": 0.05})
    cfg.execution.compile = True
    group_after(cfg, 1)
    said = [line for line in capsys.readouterr().err.splitlines()
            if line.startswith("execution.compile")]
    assert len(said) == 2
    assert "one after another" in said[0] and "LoRA" in said[1]
