"""Sequential against batched clients on the device at hand (decent/tools/throughput.py):
per workload and dtype, seconds per round in each mode and their ratio, examples per
second, peak device memory, the device's busy fraction and the model FLOPs utilisation.

On a GPU: SeedFlood SubCGE SmolLM2 at 16 and 128 clients, LoRA-DSGD SmolLM2 at 16 and 64,
the MLP quick start at 1 024, each in float32 and bfloat16 (the MLP in float32: it has no
dtype setting). On a CPU: its slice (SeedFlood SubCGE on a tiny Llama at 16 clients,
LoRA-DSGD on a tiny Llama at 4, the MLP quick start at 256), the language models in
float32 and bfloat16.

    python benchmarks/gpu_throughput.py [--rounds 4] [--slice]
"""

from __future__ import annotations

import argparse
import sys


def main() -> None:
    import torch

    from decent.tools import throughput

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=4, help="measured rounds per arm")
    p.add_argument("--slice", action="store_true", help="the doctor's short slice")
    args = p.parse_args()
    torch.set_num_threads(1)
    if torch.cuda.is_available():
        device = "cuda"
        where = torch.cuda.get_device_name(0)
        workloads = throughput.GPU_SLICE if args.slice else throughput.GPU_WORKLOADS
    else:
        device, where, workloads = "cpu", "CPU (1 thread)", throughput.CPU_WORKLOADS
    # each row on stderr as it finishes, so a long run shows where it is
    rows = throughput.run(workloads, device, args.rounds,
                          say=lambda line: print(line, file=sys.stderr, flush=True))
    print(throughput.table(rows, where))


if __name__ == "__main__":
    main()
