"""Forward-pass throughput of SmolLM2-135M on the classification prompt, CPU.

Batches of 16 SST-2-style prompts ("<review> It was") of Rotten Tomatoes snippets. Three
ways to get the class scores, measured alternately in one run (median of ``--repeats``):

* full: the model's usual forward, logits for every position over the whole vocabulary
  (49 152 rows of the output projection at each of ~40 positions);
* last: the whole vocabulary at the last position only (``logits_to_keep=1``);
* label words: the hidden state at the last position times the two label-word rows only
  (what decent's prompted tasks use).

    python benchmarks/label_word_logits.py [--batches 8] [--repeats 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from decent.models.causal_lm import CausalLMConfig, build_causal_lm
from decent.models.label_logits import label_word_logits
from decent.tasks.prompted import PromptedConfig, PromptedTask


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model_cfg = CausalLMConfig()
    model = build_causal_lm(model_cfg, {}).eval()
    task = PromptedTask(PromptedConfig(name="rotten_tomatoes", num_train=16, num_val=0,
                                       num_test=args.batches * args.batch_size), 0, model_cfg)
    data, bs = task.held_out, args.batch_size
    batches = [data.rows(torch.arange(i * bs, (i + 1) * bs)) for i in range(args.batches)]
    tokens = sum(int(mask.sum()) for _, mask, _ in batches)
    label_ids = task.label_ids

    def full(ids, mask):
        return model(input_ids=ids, attention_mask=mask).logits

    def last(ids, mask):
        return model(input_ids=ids, attention_mask=mask, logits_to_keep=1).logits

    def words(ids, mask):
        return label_word_logits(model, ids, mask, label_ids)

    ways = {"full vocabulary, all positions": full, "full vocabulary, last position": last,
            "label words only": words}
    times: dict[str, list[float]] = {name: [] for name in ways}
    with torch.no_grad():
        for fn in ways.values():  # warm-up
            fn(*batches[0][:2])
        for _ in range(args.repeats):
            for name, fn in ways.items():
                t0 = time.perf_counter()
                for ids, mask, _ in batches:
                    fn(ids, mask)
                times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["full vocabulary, all positions"])
    print(f"SmolLM2-135M, {args.batches} batches of {bs} prompts ({tokens} tokens), "
          f"{args.threads} threads, median of {args.repeats}")
    print(f"{'logits':<32} {'s/batch':>8} {'tokens/s':>9} {'speed-up':>9}")
    for name, ts in times.items():
        t = statistics.median(ts)
        print(f"{name:<32} {t / args.batches:>8.3f} {tokens / t:>9.0f} {base / t:>8.2f}×")


if __name__ == "__main__":
    main()
