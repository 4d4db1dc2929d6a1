# PyTorch reference for bench_gpt_cuda: the same GPT (GPT-2 124M shape, pre-norm,
# GELU tanh, untied head, bf16 autocast with f32 weights, fused AdamW) on random
# tokens, eager and torch.compile; prints one table with troupe's row if given.
#
#   python3 bench_gpt2_torch.py [--batch 16] [--steps 10] [--troupe result.csv]
import argparse, math, statistics, time
import torch
import torch.nn as nn
import torch.nn.functional as F

L, H, C, T, V = 12, 12, 768, 1024, 50257
PEAK = 989e12


def step_flops(batch):  # the same formula as troupe's gpt_step_flops
    per_token = L * (24.0 * C * C + 4.0 * T * C) + 2.0 * C * V
    return 3.0 * per_token * batch * T


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block() for _ in range(L))
        self.ln_f, self.lm_head = nn.LayerNorm(C), nn.Linear(C, V, bias=False)
        for n, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * L) if n.endswith("c_proj.weight") or n.endswith("mlp_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.h:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, V), targets.view(-1))


def run(compiled, batch, steps):
    torch.manual_seed(0)
    model = GPT().cuda()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    fwd = torch.compile(model) if compiled else model
    idx = torch.randint(0, V, (batch, T), device="cuda")
    tgt = torch.randint(0, V, (batch, T), device="cuda")
    times, t_first = [], time.time()
    for s in range(3 + steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(idx, tgt)
        loss.backward()
        opt.step()
        b.record()
        torch.cuda.synchronize()
        if s == 0:
            warm = time.time() - t_first
        if s >= 3:
            times.append(a.elapsed_time(b) * 1e-3)
    med = statistics.median(times)
    del model, opt
    torch.cuda.empty_cache()
    return med, loss.item(), warm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--troupe", default=None)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    rows = []
    if a.troupe:
        try:
            _, b, ms, tps, mfu = open(a.troupe).read().strip().split(",")
            rows.append(("troupe (gpt_cuda)", float(ms) * 1e-3, None))
        except (OSError, ValueError) as e:
            print("no troupe result:", e)
    for name, comp in (("pytorch eager", False), ("pytorch torch.compile", True)):
        med, loss, warm = run(comp, a.batch, a.steps)
        print(f"{name}: first step {warm:.1f} s, final loss {loss:.4f}", flush=True)
        rows.append((name, med, None))
    fl = step_flops(a.batch)
    print(f"\ndevice: {torch.cuda.get_device_name()}  torch {torch.__version__}  batch {a.batch} x {T}")
    print(f"FLOPs/step = 6*(12*L*C^2 + V*C)*tokens + 12*L*C*T*tokens = {fl/1e12:.2f} TFLOP; peak {PEAK/1e12:.0f} TFLOP/s")
    print(f"| {'run':24} | {'step ms':>8} | {'tokens/s':>10} | {'TFLOP/s':>8} | {'MFU':>6} |")
    print(f"|{'-'*26}|{'-'*10}|{'-'*12}|{'-'*10}|{'-'*8}|")
    for name, med, _ in rows:
        print(f"| {name:24} | {med*1e3:8.2f} | {a.batch*T/med:10.0f} | {fl/med/1e12:8.1f} | {100*fl/med/PEAK:5.1f}% |")


if __name__ == "__main__":
    main()
