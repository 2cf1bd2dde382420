"""SPES's auxiliary losses and warm-up against the authors' code, written again here in
plain torch from zjr2000/SPES and the megablocks 0.7.0 it pins: the load-balancing loss
(``megablocks/layers/moe.py`` ``batched_load_balancing_loss``: 1 at perfect balance), the
router z-loss (``megablocks/layers/router.py`` ``batched_router_zloss``, summed over the
layers by ``spes/train.py``), the output-logit z-loss their trainer applies (flash-attn's
fused cross-entropy with the loss functions' default multiplier 1e-4) and the warm-up of
their scheduler (``spes/optim.py``: from 0.1 · lr)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from decent.core.errors import ConfigError
from decent.core.schema import validate_fields
from decent.models.experts import ExpertMLP, SplitExperts
from decent.models.output_logits import OutputLogits
from decent.models.router_losses import (
    RouterLogits,
    balance_loss,
    router_z_loss,
    top_k_choice,
)
from decent.strategies.config import LRScheduleConfig
from decent.strategies.spes import SPESConfig

LAYERS, TOKENS, EXPERTS, TOP_K = 4, 24, 8, 2


def router_logits() -> list[torch.Tensor]:
    """A fixed tensor of router logits: LAYERS layers of TOKENS tokens × EXPERTS."""
    gen = torch.Generator().manual_seed(1234)
    return list(torch.randn(LAYERS, TOKENS, EXPERTS, generator=gen, dtype=torch.float64))


# ------------------------------------------------------------- the authors' code, again
def authors_router(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """megablocks' LearnedRouter: scores = softmax(logits), top-k of the scores."""
    scores = logits.softmax(dim=-1)
    return scores, torch.topk(scores, top_k, dim=-1).indices


def authors_balance_loss(layers: list[torch.Tensor], top_k: int, loss_weight: float = 1.0,
                         picks: list[torch.Tensor] | None = None) -> torch.Tensor:
    """batched_load_balancing_loss: per layer the histogram of the flattened top-k expert
    ids (the router's, or megablocks' router's when ``picks`` is None) and the scores;
    scores concatenated over layers and averaged over tokens; then
    loss_weight · E / (num_layers · tokens · top_k) · dot(tokens_per_expert, scores)."""
    tokens_per_expert, expert_scores = [], []
    for i, logits in enumerate(layers):
        scores, top = authors_router(logits, top_k)
        top = top if picks is None else picks[i]
        num_experts = logits.shape[1]
        tokens_per_expert.append(torch.histc(top.flatten().double(), bins=num_experts,
                                             min=0, max=num_experts - 1))
        expert_scores.append(scores)
    num_experts, num_layers, tokens = layers[0].shape[1], len(layers), layers[0].shape[0]
    scores_mean = torch.cat(expert_scores, dim=1).mean(dim=0)
    counts = torch.cat(tokens_per_expert).to(scores_mean.dtype)
    scale = num_experts * loss_weight / (num_layers * tokens * top_k)
    return scale * torch.dot(counts, scores_mean)


def authors_router_zloss(layers: list[torch.Tensor], zloss_weight: float = 1.0) -> torch.Tensor:
    """batched_router_zloss (per router: logsumexp over experts, squared, mean over
    tokens; times the weight), then ``.sum()`` over the routers as spes/train.py does."""
    per_router = torch.stack([torch.logsumexp(z, dim=1).square().mean() for z in layers])
    return (zloss_weight * per_router).sum()


AUTHORS_Z_MULTIPLIER = 1e-4  # cross_entropy_loss / fused_loss_fn default, never overridden


def authors_lm_loss(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Trainer.train_micro_batch with fused_loss and softmax_auxiliary_loss on: flash-attn's
    per-token loss lse − logit[label] + m · lse² (the z-loss folded in), summed and divided
    by the batch's tokens; plus the z-loss it also returns, which is non-differentiable."""
    flat = logits[..., :-1, :].reshape(-1, logits.shape[-1])
    labels = input_ids[..., 1:].reshape(-1)
    lse = flat.logsumexp(-1)
    per_token = lse - flat.gather(1, labels[:, None]).squeeze(1) + AUTHORS_Z_MULTIPLIER * lse ** 2
    z_returned = (AUTHORS_Z_MULTIPLIER * lse ** 2).detach()
    batch_size_in_tokens = input_ids.numel()
    return per_token.sum() / batch_size_in_tokens + z_returned.sum() / batch_size_in_tokens


def authors_lr(initial_lr: float, step: int, warmup: int, max_steps: int,
               alpha_f: float = 0.1) -> float:
    """CosWithWarmup.get_lr with warmup_min_lr unset (so 0.1 · lr) at the 1-based step."""
    eta_min = initial_lr * alpha_f
    if step < warmup:
        start = initial_lr * 0.10
        return start + (initial_lr - start) * min(step, warmup) / warmup
    if step >= max_steps:
        return eta_min
    return eta_min + (initial_lr - eta_min) * (
        1 + math.cos(math.pi * (step - warmup) / (max_steps - warmup))) / 2


# ------------------------------------------------------------------ load-balancing loss
def test_balance_loss_is_megablocks():
    layers = router_logits()
    ours = balance_loss(layers, [top_k_choice(z, TOP_K) for z in layers])
    assert float(ours) == pytest.approx(float(authors_balance_loss(layers, TOP_K)), abs=1e-12)


@pytest.mark.parametrize("top_k", [1, 2, 4])
def test_balance_loss_is_one_at_perfect_balance(top_k):
    """Token t prefers experts t, t + 1, ... (mod E), by the same logit profile: every
    expert gets T·k/E assignments and the mean probability 1/E, in every layer."""
    profile = -torch.arange(EXPERTS, dtype=torch.float32)  # distinct: no ties in the top-k
    one_layer = torch.stack([profile.roll(t) for t in range(TOKENS)])
    layers = [one_layer * (1 + layer) for layer in range(LAYERS)]  # layers differ, all balanced
    chosen = [top_k_choice(z, top_k) for z in layers]
    assert all(torch.equal(torch.bincount(c.flatten(), minlength=EXPERTS),
                           torch.full((EXPERTS,), TOKENS * top_k // EXPERTS)) for c in chosen)
    assert float(balance_loss(layers, chosen)) == pytest.approx(1.0, abs=1e-6)
    assert float(authors_balance_loss(layers, top_k)) == pytest.approx(1.0, abs=1e-6)


class ContraryRouter(nn.Module):
    """A router that reports (logits, weights, picks) as transformers' do, but picks the
    k *least* likely experts: a loss that counted top-k of the logits would differ."""

    top_k = TOP_K

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(EXPERTS, hidden, dtype=torch.float64))

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        logits = h @ self.weight.T
        weights, picks = torch.topk(-logits.softmax(-1), self.top_k, dim=-1)
        return logits, -weights, picks


class Block(nn.Module):
    """An MoE block as RouterLogits finds one: a ``gate`` beside its SplitExperts."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.gate = ContraryRouter(hidden)

        def linear(i: int, o: int) -> nn.Linear:
            return nn.Linear(i, o, bias=False, dtype=torch.float64)

        self.experts = SplitExperts(
            [ExpertMLP(linear(hidden, 4), linear(hidden, 4), linear(4, hidden), nn.SiLU())
             for _ in range(EXPERTS)])

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        _, weights, picks = self.gate(h)
        return h + self.experts(h, picks, weights)


def test_router_logits_counts_the_routers_own_picks():
    """Hooked on two MoE blocks: each layer's logits and the router's own picks, and the
    authors' losses on them (megablocks histograms the router's chosen experts)."""
    torch.manual_seed(0)
    hidden = 6
    model = nn.Sequential(Block(hidden), Block(hidden))
    with RouterLogits(model) as captured:
        model(torch.randn(TOKENS, hidden, dtype=torch.float64))
    assert captured.found and len(captured.layers) == len(captured.chosen) == 2
    for z, picks in zip(captured.layers, captured.chosen, strict=True):
        assert torch.equal(picks, torch.topk(-z.detach(), TOP_K, dim=-1).indices)
    logits = [z.detach() for z in captured.layers]
    want = authors_balance_loss(logits, TOP_K, picks=captured.chosen)
    assert float(captured.balance_loss().detach()) == pytest.approx(float(want), abs=1e-12)
    assert float(captured.z_loss().detach()) == pytest.approx(
        float(authors_router_zloss(logits)), abs=1e-12)


# ------------------------------------------------------------------------ router z-loss
def test_router_z_loss_is_megablocks_summed_over_layers():
    layers = router_logits()
    assert float(router_z_loss(layers)) == pytest.approx(
        float(authors_router_zloss(layers)), abs=1e-12)
    per_layer = [float(router_z_loss([z])) for z in layers]  # a sum, not a mean
    assert float(router_z_loss(layers)) == pytest.approx(sum(per_layer), abs=1e-12)


# --------------------------------------------------------------- output-logit z-loss
class Head(nn.Module):
    """A "model" whose output embedding passes the given logits through."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Identity()

    def get_output_embeddings(self) -> nn.Module:
        return self.head

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return self.head(logits)


def test_logit_z_loss_has_the_authors_weight_beside_the_cross_entropy():
    """Our step minimises mean CE + logit_z_loss · (mean log²Z over the predicting
    positions); the authors' trainer minimises (Σ CE + 1e-4 · Σ log²Z) / (B·S) over the same
    positions. With SPES's default the two differ by the constant S/(S − 1) only, so their
    gradients are proportional, and our z term is theirs per predicting position."""
    batch, seq, vocab = 3, 10, 17
    gen = torch.Generator().manual_seed(7)
    fixed = 3 * torch.randn(batch, seq, vocab, generator=gen, dtype=torch.float64)
    ids = torch.randint(0, vocab, (batch, seq), generator=gen)
    coef = SPESConfig().logit_z_loss
    assert coef == AUTHORS_Z_MULTIPLIER

    ours_logits = fixed.clone().requires_grad_(True)
    model = Head()
    with OutputLogits(model) as out:
        logits = model(ours_logits)
    z = out.z_loss()
    lse = fixed[:, :-1].logsumexp(-1)
    assert float(z.detach()) == pytest.approx(float(lse.square().mean()), rel=1e-12)
    ce = F.cross_entropy(logits[:, :-1].reshape(-1, vocab), ids[:, 1:].reshape(-1))
    (ce + coef * z).backward()

    theirs_logits = fixed.clone().requires_grad_(True)
    authors_lm_loss(theirs_logits, ids).backward()
    assert ours_logits.grad is not None and theirs_logits.grad is not None
    torch.testing.assert_close(ours_logits.grad, theirs_logits.grad * seq / (seq - 1),
                               rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------------------ warm-up
def test_spes_warm_up_starts_at_a_tenth_of_lr_as_the_authors_scheduler():
    """Step t (0-based) is the authors' step t + 1 (their trainer bumps global_step first):
    the first step at 0.1 + 0.9/W, step W − 1 at lr, the whole warm-up on their line."""
    warmup, total, lr = 20, 200, 5e-4
    sched = SPESConfig().lr_schedule
    sched.warmup_steps, sched.total_steps = warmup, total
    assert sched.warmup_start_ratio == 0.1
    assert sched.factor(0) == pytest.approx(0.1 + 0.9 / warmup, abs=1e-15)
    assert sched.factor(warmup - 1) == pytest.approx(1.0, abs=1e-15)
    for t in range(warmup):
        assert lr * sched.factor(t) == pytest.approx(authors_lr(lr, t + 1, warmup, total),
                                                     abs=1e-18)
    # the other methods' default is unchanged: from 0
    plain = LRScheduleConfig(name="cosine", warmup_steps=warmup, total_steps=total)
    assert [plain.factor(t) for t in (0, warmup - 1)] == [1 / warmup, 1.0]


@pytest.mark.parametrize("bad", [-0.1, 1.0])
def test_warmup_start_ratio_is_validated(bad):
    cfg = SPESConfig(lr_schedule=LRScheduleConfig(name="cosine", warmup_steps=2,
                                                  warmup_start_ratio=bad))
    with pytest.raises(ConfigError, match=r"strategy\.lr_schedule\.warmup_start_ratio"):
        validate_fields(cfg, "strategy")
