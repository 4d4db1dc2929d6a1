# PyTorch side of bench_gpt: trains the same GPT on the CPU with one thread and
# prints the median milliseconds per step (forward + backward + AdamW).
# Usage: /usr/bin/python3 bench_gpt.py LAYERS D_MODEL HEADS CONTEXT BATCH VOCAB RUNS STEPS
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_reference import gpt_forward, loss_of, make_optimizer  # noqa: E402


def main():
    layers, d_model, heads, context, batch, vocab, runs, steps = map(int, sys.argv[1:9])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = {"layers": layers, "d_model": d_model, "heads": heads, "context": context, "vocab": vocab,
           "ignore_index": -1, "lr": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1}
    c = d_model
    shapes = {"wte": (vocab, c), "wpe": (context, c)}
    for l in range(layers):
        shapes.update({f"h.{l}.ln_1.weight": (c,), f"h.{l}.ln_1.bias": (c,),
                       f"h.{l}.attn.c_attn.weight": (3 * c, c), f"h.{l}.attn.c_attn.bias": (3 * c,),
                       f"h.{l}.attn.c_proj.weight": (c, c), f"h.{l}.attn.c_proj.bias": (c,),
                       f"h.{l}.ln_2.weight": (c,), f"h.{l}.ln_2.bias": (c,),
                       f"h.{l}.mlp.c_fc.weight": (4 * c, c), f"h.{l}.mlp.c_fc.bias": (4 * c,),
                       f"h.{l}.mlp.c_proj.weight": (c, 4 * c), f"h.{l}.mlp.c_proj.bias": (c,)})
    shapes.update({"ln_f.weight": (c,), "ln_f.bias": (c,), "lm_head.weight": (vocab, c)})
    names = list(shapes)
    p = {}
    for n, s in shapes.items():
        t = torch.randn(s) * 0.02 if len(s) == 2 else (torch.ones(s) if n.endswith("ln_1.weight") or
                                                      n.endswith("ln_2.weight") or n == "ln_f.weight" else torch.zeros(s))
        p[n] = t.requires_grad_(True)
    opt = make_optimizer(cfg, names, p)
    tokens = torch.randint(0, vocab, (batch, context))
    targets = torch.randint(0, vocab, (batch, context))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_of(cfg, gpt_forward(cfg, p, tokens), targets)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(3):
        step()
    cpu, wall = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(steps):
            step()
        cpu.append((time.process_time() - c0) * 1000.0 / steps)
        wall.append((time.perf_counter() - t0) * 1000.0 / steps)
    # CPU time, as troupe's side reports it: not inflated by other jobs on shared cores.
    print(f"torch_ms_per_step {statistics.median(cpu):.3f} {statistics.median(wall):.3f}")


if __name__ == "__main__":
    main()
