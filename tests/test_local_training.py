"""The inner loop's recipe pieces every method with local steps shares: gradient clipping
(``strategy.grad_clip``), the output-logit z-loss (``strategy.logit_z_loss``) and AdamW's
betas, each against a step written out by hand."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from decent.strategies.base import Client
from decent.strategies.local_training import LocalTrainingConfig, local_steps, make_optimizer
from decent.strategies.spes import SPESConfig
from decent.tools.cli import main
from tests.helpers import tiny

VOCAB, SEQ = 7, 5


class TinyLM(torch.nn.Module):
    """Embedding → tanh → LM head: logits (batch × positions × vocabulary)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 6)
        self.head = torch.nn.Linear(6, VOCAB)

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.head

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.embed(ids)))


class Batches:
    """A client's data: the next fixed batch on each draw."""

    def __init__(self, batches: list[torch.Tensor]) -> None:
        self.batches, self.i = batches, 0

    def sample(self, _size: int, _generator: torch.Generator) -> torch.Tensor:
        self.i += 1
        return self.batches[self.i - 1]


class NextToken:
    @staticmethod
    def loss(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
        logits = model(ids)
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())


def setup(steps: int) -> tuple[TinyLM, list[torch.Tensor]]:
    torch.manual_seed(0)
    model = TinyLM()
    with torch.no_grad():  # large logits: a large z-loss and gradients above the clip
        model.head.weight.mul_(8)
    batches = [torch.randint(0, VOCAB, (3, SEQ)) for _ in range(steps)]
    return model, batches


def run(model: TinyLM, batches: list[torch.Tensor], cfg: LocalTrainingConfig) -> Client:
    client = Client(1, model, Batches(batches), torch.device("cpu"), torch.Generator())
    local_steps(client, make_optimizer(model, cfg), NextToken(), len(batches), 3, cfg)
    return client


def test_grad_clip_scales_the_global_norm_before_each_sgd_step():
    model, batches = setup(3)
    reference = copy.deepcopy(model)
    client = run(model, batches, LocalTrainingConfig(lr=0.1, grad_clip=0.5))
    norms = []
    for ids in batches:  # by hand: g ← g · min(1, c / (‖g‖ + 1e-6)) (torch's), θ ← θ − η g
        reference.zero_grad()
        NextToken.loss(reference, ids).backward()
        grads = [p.grad for p in reference.parameters()]
        norm = float(np.sqrt(sum(float((g.double() ** 2).sum()) for g in grads)))
        norms.append(norm)
        scale = min(1.0, 0.5 / (norm + 1e-6))
        with torch.no_grad():
            for p in reference.parameters():
                p -= 0.1 * (p.grad * scale)
    assert min(norms) > 0.5  # every step was clipped
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert client.stats["grad_norm"] == pytest.approx(np.mean(norms), rel=1e-5)


def test_no_clipping_when_off():
    model, batches = setup(2)
    unclipped, _ = setup(2)
    run(model, batches, LocalTrainingConfig(lr=0.1, grad_clip=1e9))
    client = run(unclipped, batches, LocalTrainingConfig(lr=0.1))
    assert "grad_norm" not in client.stats
    for a, b in zip(model.parameters(), unclipped.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_logit_z_loss_adds_mean_squared_log_normaliser_of_predicting_positions():
    model, batches = setup(2)
    reference = copy.deepcopy(model)
    client = run(model, batches, LocalTrainingConfig(lr=0.1, logit_z_loss=0.01))
    zs = []
    for ids in batches:  # CE + 0.01 · mean over batch × first SEQ − 1 positions of log²Z
        reference.zero_grad()
        logits = reference(ids)
        z = torch.logsumexp(logits[:, :-1].double(), dim=-1).pow(2).mean()
        zs.append(float(z.detach()))
        (NextToken.loss(reference, ids) + 0.01 * z.float()).backward()
        with torch.no_grad():
            for p in reference.parameters():
                p -= 0.1 * p.grad
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert client.stats["logit_z_loss"] == pytest.approx(np.mean(zs), rel=1e-5)
    without, _ = setup(2)
    run(without, batches, LocalTrainingConfig(lr=0.1))
    assert not torch.allclose(without.head.weight, model.head.weight, atol=1e-4)


def test_adamw_takes_the_configured_betas():
    model, _ = setup(1)
    opt = make_optimizer(model, LocalTrainingConfig(optimizer="adamw", betas=[0.9, 0.95]))
    assert opt.param_groups[0]["betas"] == (0.9, 0.95)


def test_spes_defaults_are_the_papers_recipe():
    """Table A1 of the paper, the released 1 B config (node_0.yaml) and the authors' code
    that reads it: the logit z-loss their trainer applies (1e-4, not the config's unread
    1e-5) and their scheduler's warm-up start (0.1 · lr)."""
    cfg = SPESConfig()
    assert (cfg.optimizer, cfg.lr, list(cfg.betas), cfg.weight_decay) == \
        ("adamw", 5e-4, [0.9, 0.95], 0.1)
    assert (cfg.grad_clip, cfg.logit_z_loss, cfg.local_steps) == (1.0, 1e-4, 100)
    sched = cfg.lr_schedule
    assert (sched.name, sched.warmup_steps, sched.warmup_start_ratio, sched.min_lr_ratio) == \
        ("cosine", 2000, 0.1, 0.1)
    assert (cfg.router_loss.balance, cfg.router_loss.z) == (0.01, 0.001)
    assert (cfg.merge_task_vectors, cfg.merge_similarity, cfg.merge_top_k,
            cfg.merge_alpha, cfg.merge_warmup_steps, cfg.merge_every) == \
        ("mean", "gate", 4, 0.1, 12_500, 500)


@pytest.mark.parametrize(("override", "field"), [
    ("strategy.betas=[0.9,0.95,0.99]", "strategy.betas"),
    ("strategy.betas=[0.9,1.0]", "strategy.betas"),
    ("strategy.grad_clip=-1", "strategy.grad_clip"),
    ("strategy.logit_z_loss=-0.1", "strategy.logit_z_loss"),
])
def test_bad_recipe_settings_are_one_line(tmp_path, capsys, override, field):
    import yaml

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(tiny(tmp_path)))
    assert main(["run", str(path), override]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err
    assert not (tmp_path / "runs").exists()
