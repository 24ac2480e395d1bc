"""PyTorch's CPU AdamW on the same flat f32 shard as bench_host_adamw, one
thread, for a side-by-side ratio in one run (share/bench/host_adamw.sh
--torch PYTHON). Prints elements per second, best of `repeats` updates.

    python host_adamw_torch.py ELEMENTS REPEATS
"""
import sys
import time

import torch


def main():
    elements, repeats = int(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(1)  # bench_host_adamw runs one thread per rank
    torch.manual_seed(0)
    param = torch.nn.Parameter(torch.randn(elements, dtype=torch.float32))
    param.grad = torch.randn(elements, dtype=torch.float32) * 1e-3
    for name, kwargs in (("for-loop", {"foreach": False}), ("foreach", {"foreach": True})):
        opt = torch.optim.AdamW([param], lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, **kwargs)
        opt.step()  # allocates m and v: not timed
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            opt.step()
            best = min(best, time.perf_counter() - start)
        print(f"torch {torch.__version__} AdamW ({name}), 1 thread: {elements} elements in {best:.4f} s, "
              f"{elements / best:.3g} elements/s")


if __name__ == "__main__":
    main()
