#!/usr/bin/env python3
"""GPT-2 logits from a Hugging Face style folder (model.safetensors and
config.json, as `troupe export --names hf` writes it), in NumPy alone.

Written for the export test from GPT-2's definition as transformers'
GPT2LMHeadModel has it (pre-norm blocks, Conv1D weights stored [in, out],
gelu_new, learned positions, causal attention scaled by 1/sqrt(head size)); it
shares no code with troupe, so agreeing logits mean the names, layouts and
config carry the model.

usage: gpt2_numpy.py FOLDER TOKENS OUT
  TOKENS: comma-separated token ids (one sequence); OUT: the logits, f32
  little-endian [T, vocab], row-major.
"""
import json
import struct
import sys

import numpy as np


def load_safetensors(path, base="transformer."):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    dtypes = {"F32": "<f4", "F16": "<f2", "BF16": None, "I32": "<i4"}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        kind = dtypes[t["dtype"]]
        if kind is None:  # bf16: the high half of an f32
            raw = np.frombuffer(body[begin:end], dtype="<u2").astype(np.uint32) << 16
            arr = raw.view(np.float32)
        else:
            arr = np.frombuffer(body[begin:end], dtype=kind)
        out[name] = arr.reshape(t["shape"]).astype(np.float64)
    # Files on the Hub differ on the base model's prefix (`base`: GPT-2's
    # `transformer.`, Llama's `model.`): read both spellings.
    return {k if k.startswith((base, "lm_head.")) else base + k: v for k, v in out.items()}


def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def gelu_new(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def logits(folder, tokens):
    cfg = json.load(open(f"{folder}/config.json"))
    w = load_safetensors(f"{folder}/model.safetensors")
    assert cfg["model_type"] == "gpt2" and cfg["activation_function"] == "gelu_new"
    eps, heads = cfg["layer_norm_epsilon"], cfg["n_head"]
    t = len(tokens)
    x = w["transformer.wte.weight"][tokens] + w["transformer.wpe.weight"][:t]
    size = x.shape[1] // heads
    mask = np.triu(np.full((t, t), -np.inf), 1)
    for i in range(cfg["n_layer"]):
        p = f"transformer.h.{i}."
        h = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = (m.reshape(t, heads, size).transpose(1, 0, 2) for m in np.split(qkv, 3, axis=-1))
        s = q @ k.transpose(0, 2, 1) / np.sqrt(size) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        a = (s / s.sum(-1, keepdims=True)) @ v
        a = a.transpose(1, 0, 2).reshape(t, heads * size)
        x = x + a @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        h = gelu_new(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = layer_norm(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    head = w["lm_head.weight"] if not cfg.get("tie_word_embeddings", True) else w["transformer.wte.weight"]
    return x @ head.T


if __name__ == "__main__":
    folder, tokens, out = sys.argv[1], [int(v) for v in sys.argv[2].split(",")], sys.argv[3]
    logits(folder, tokens).astype("<f4").tofile(out)
