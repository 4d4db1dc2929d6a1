# PyTorch reference of troupe's GPT (ops/gpt.hpp) for the side-by-side test:
# reads weights and a batch from a directory, writes logits, loss, gradients and
# the parameters after AdamW steps back into it. Run with Debian's /usr/bin/python3.
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F


def read_config(d):
    cfg = {}
    for line in open(f"{d}/config.txt"):
        k, v = line.split()
        cfg[k] = float(v) if "." in v or "e" in v else int(v)
    return cfg


def read_params(d):
    params = {}
    names = []
    for line in open(f"{d}/params.txt"):
        parts = line.split()
        name, shape = parts[0], [int(x) for x in parts[1:]]
        data = np.fromfile(f"{d}/{name}.bin", dtype=np.float32).reshape(shape)
        params[name] = torch.tensor(data, requires_grad=True)
        names.append(name)
    return names, params


def gpt_forward(cfg, p, tokens):
    B, T = tokens.shape
    C, H, L = cfg["d_model"], cfg["heads"], cfg["layers"]
    hd = C // H
    x = p["wte"][tokens] + p["wpe"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        q = lambda s: p[f"h.{l}.{s}"]
        h = F.layer_norm(x, (C,), q("ln_1.weight"), q("ln_1.bias"), 1e-5)
        qkv = F.linear(h, q("attn.c_attn.weight"), q("attn.c_attn.bias"))
        qq, kk, vv = qkv.split(C, dim=2)
        qq = qq.view(B, T, H, hd).transpose(1, 2)
        kk = kk.view(B, T, H, hd).transpose(1, 2)
        vv = vv.view(B, T, H, hd).transpose(1, 2)
        att = (qq @ kk.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ vv).transpose(1, 2).contiguous().view(B, T, C)
        x = x + F.linear(y, q("attn.c_proj.weight"), q("attn.c_proj.bias"))
        h = F.layer_norm(x, (C,), q("ln_2.weight"), q("ln_2.bias"), 1e-5)
        h = F.gelu(F.linear(h, q("mlp.c_fc.weight"), q("mlp.c_fc.bias")), approximate="tanh")
        x = x + F.linear(h, q("mlp.c_proj.weight"), q("mlp.c_proj.bias"))
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
    return F.linear(x, p["lm_head.weight"])


def make_optimizer(cfg, names, p):
    decay = [p[n] for n in names if p[n].dim() >= 2]
    no_decay = [p[n] for n in names if p[n].dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"])


def loss_of(cfg, logits, targets):
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=cfg["ignore_index"])


def main(d):
    torch.set_num_threads(1)
    cfg = read_config(d)
    names, p = read_params(d)
    shape = (cfg["batch"], cfg["seq"])
    tokens = torch.tensor(np.fromfile(f"{d}/tokens.bin", dtype=np.int32).reshape(shape)).long()
    targets = torch.tensor(np.fromfile(f"{d}/targets.bin", dtype=np.int32).reshape(shape)).long()
    logits = gpt_forward(cfg, p, tokens)
    loss = loss_of(cfg, logits, targets)
    loss.backward()
    logits.detach().numpy().astype(np.float32).tofile(f"{d}/logits.out")
    with open(f"{d}/loss.out", "w") as f:
        f.write(f"{loss.item():.9e}\n")
    for n in names:
        p[n].grad.numpy().astype(np.float32).tofile(f"{d}/{n}.grad.out")
    opt = make_optimizer(cfg, names, p)
    for step in range(cfg["steps"]):
        if step > 0:
            opt.zero_grad()
            loss_of(cfg, gpt_forward(cfg, p, tokens), targets).backward()
        opt.step()
    for n in names:
        p[n].detach().numpy().astype(np.float32).tofile(f"{d}/{n}.after.out")


if __name__ == "__main__":
    main(sys.argv[1])
