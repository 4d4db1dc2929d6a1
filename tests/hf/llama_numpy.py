#!/usr/bin/env python3
"""Llama logits from a Hugging Face style folder (model.safetensors and
config.json of a LlamaForCausalLM), in NumPy alone.

Written from Llama's definition as transformers' modeling_llama.py has it:
pre-norm blocks with RMSNorm, rotary position embedding on q and k (the
rotate_half convention, theta = rope_theta), grouped-query attention (kv head
h // (heads / kv_heads) serves query head h), a SwiGLU MLP down(silu(gate(x)) *
up(x)), no biases, a head tied to the embedding or not. It shares no code with
troupe, so agreeing logits mean the names, layouts and config carry the model.

usage: llama_numpy.py FOLDER TOKENS OUT   (as gpt2_numpy.py: OUT gets f32 [T, vocab])
       llama_numpy.py --self-test         (checks the model against hand-checkable facts)
"""
import json
import sys

import numpy as np

from gpt2_numpy import load_safetensors


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope(x, theta):
    """x [heads, T, size] rotated by position: pairs (i, i + size/2) turn by pos * theta^(-2i/size)."""
    size = x.shape[-1]
    freq = theta ** (-np.arange(0, size, 2) / size)
    angle = np.arange(x.shape[1])[:, None] * freq[None, :]
    cos, sin = np.cos(np.concatenate([angle, angle], -1)), np.sin(np.concatenate([angle, angle], -1))
    half = np.concatenate([-x[..., size // 2:], x[..., : size // 2]], -1)
    return x * cos + half * sin


def attention(q, k, v):
    """Causal softmax attention of q [H, T, s] over k, v [H, T, s]."""
    t = q.shape[1]
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1]) + np.triu(np.full((t, t), -np.inf), 1)
    s = np.exp(s - s.max(-1, keepdims=True))
    return (s / s.sum(-1, keepdims=True)) @ v


def logits(cfg, w, tokens):
    heads, d = cfg["num_attention_heads"], cfg["hidden_size"]
    kv_heads, eps = cfg.get("num_key_value_heads", heads), cfg.get("rms_norm_eps", 1e-6)
    theta, size = cfg.get("rope_theta", 10000.0), cfg.get("head_dim", d // heads)
    t = len(tokens)
    x = w["model.embed_tokens.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q, k, v = (h @ w[p + f"self_attn.{n}_proj.weight"].T for n in "qkv")
        q = rope(q.reshape(t, heads, size).transpose(1, 0, 2), theta)
        k = rope(k.reshape(t, kv_heads, size).transpose(1, 0, 2), theta)
        v = v.reshape(t, kv_heads, size).transpose(1, 0, 2)
        group = heads // kv_heads  # transformers' repeat_kv: query head h reads kv head h // group
        a = attention(q, np.repeat(k, group, axis=0), np.repeat(v, group, axis=0))
        x = x + a.transpose(1, 0, 2).reshape(t, heads * size) @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (gate / (1.0 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    tied = cfg.get("tie_word_embeddings", False) or "lm_head.weight" not in w
    return x @ (w["model.embed_tokens.weight"] if tied else w["lm_head.weight"]).T


def random_model(cfg, seed):
    rng = np.random.default_rng(seed)
    d, f, size = cfg["hidden_size"], cfg["intermediate_size"], cfg["hidden_size"] // cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads", cfg["num_attention_heads"]) * size
    shapes = {"model.embed_tokens.weight": (cfg["vocab_size"], d), "model.norm.weight": (d,),
              "lm_head.weight": (cfg["vocab_size"], d)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
                       p + "self_attn.q_proj.weight": (d, d), p + "self_attn.k_proj.weight": (kv, d),
                       p + "self_attn.v_proj.weight": (kv, d), p + "self_attn.o_proj.weight": (d, d),
                       p + "mlp.gate_proj.weight": (f, d), p + "mlp.up_proj.weight": (f, d),
                       p + "mlp.down_proj.weight": (d, f)})
    return {n: (1.0 if n.endswith("norm.weight") else 0.0) + 0.3 * rng.standard_normal(s) for n, s in shapes.items()}


def loop_logits(cfg, w, tokens):
    """The same model written as plain loops over tokens, heads and pairs: the self-test's second opinion."""
    heads, d, eps, theta = cfg["num_attention_heads"], cfg["hidden_size"], cfg["rms_norm_eps"], cfg["rope_theta"]
    size, group = d // heads, heads // cfg["num_key_value_heads"]
    norm = lambda v, g: [v[j] / (sum(e * e for e in v) / len(v) + eps) ** 0.5 * g[j] for j in range(len(v))]
    mat = lambda m, v: [sum(m[r][c] * v[c] for c in range(len(v))) for r in range(len(m))]

    def turn(vec, pos):  # one head's vector: pair (j, j + size/2) by pos * theta^(-2j/size)
        out = list(vec)
        for j in range(size // 2):
            c, s = np.cos(pos * theta ** (-2 * j / size)), np.sin(pos * theta ** (-2 * j / size))
            out[j], out[j + size // 2] = vec[j] * c - vec[j + size // 2] * s, vec[j + size // 2] * c + vec[j] * s
        return out

    xs = [list(w["model.embed_tokens.weight"][tok]) for tok in tokens]
    p = "model.layers.0."
    hs = [norm(x, w[p + "input_layernorm.weight"]) for x in xs]
    q, k, v = ([mat(w[p + f"self_attn.{n}_proj.weight"], h) for h in hs] for n in "qkv")
    for i, x in enumerate(xs):
        att = []
        for hd in range(heads):
            kh = hd // group
            qi = turn(q[i][hd * size:(hd + 1) * size], i)
            score = [sum(a * b for a, b in zip(qi, turn(k[j][kh * size:(kh + 1) * size], j))) / size ** 0.5
                     for j in range(i + 1)]
            e = [np.exp(s - max(score)) for s in score]
            att += [sum(e[j] * v[j][kh * size + c] for j in range(i + 1)) / sum(e) for c in range(size)]
        x = [a + b for a, b in zip(x, mat(w[p + "self_attn.o_proj.weight"], att))]
        h = norm(x, w[p + "post_attention_layernorm.weight"])
        g, u = mat(w[p + "mlp.gate_proj.weight"], h), mat(w[p + "mlp.up_proj.weight"], h)
        x = [a + b for a, b in zip(x, mat(w[p + "mlp.down_proj.weight"], [a / (1 + np.exp(-a)) * b for a, b in zip(g, u)]))]
        xs[i] = mat(w["lm_head.weight"], norm(x, w["model.norm.weight"]))
    return np.array(xs)


def self_test():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 1, 8))
    assert np.array_equal(rope(x, 10000.0), x), "RoPE at position 0 is the identity"
    q, k = rng.standard_normal((1, 1, 8)), rng.standard_normal((1, 1, 8))
    at = lambda m, n: (rope(np.repeat(q, m + 1, 1), 500.0)[0, m] @ rope(np.repeat(k, n + 1, 1), 500.0)[0, n])
    assert abs(at(5, 2) - at(9, 6)) < 1e-12, "rotary scores depend on the distance only"
    cfg = {"hidden_size": 8, "intermediate_size": 12, "num_attention_heads": 4, "num_key_value_heads": 2,
           "num_hidden_layers": 1, "vocab_size": 11, "rms_norm_eps": 1e-5, "rope_theta": 100.0}
    w, tokens = random_model(cfg, 1), [3, 1, 4, 1, 5, 9]
    worst = np.abs(logits(cfg, w, tokens) - loop_logits(cfg, w, tokens)).max()
    assert worst < 1e-10, f"the vectorised model is the loops' ({worst:.2e})"
    mha = dict(cfg, num_key_value_heads=4)  # the kv heads copied out to every query head they serve
    wm = dict(w)
    for n in ("k", "v"):
        m = w[f"model.layers.0.self_attn.{n}_proj.weight"].reshape(2, 2, 8)
        wm[f"model.layers.0.self_attn.{n}_proj.weight"] = np.repeat(m, 2, axis=0).reshape(8, 8)
    assert np.abs(logits(mha, wm, tokens) - logits(cfg, w, tokens)).max() < 1e-12, "GQA is MHA with shared kv heads"
    tied = dict(w, **{"lm_head.weight": w["model.embed_tokens.weight"]})
    assert np.array_equal(logits(dict(cfg, tie_word_embeddings=True), w, tokens), logits(cfg, tied, tokens))
    print(f"llama_numpy self-test passed (loops agree to {worst:.1e})")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    else:
        folder, tokens, out = sys.argv[1], [int(v) for v in sys.argv[2].split(",")], sys.argv[3]
        cfg = json.load(open(f"{folder}/config.json"))
        assert "LlamaForCausalLM" in cfg.get("architectures", ["LlamaForCausalLM"])
        logits(cfg, load_safetensors(f"{folder}/model.safetensors", "model."), tokens).astype("<f4").tofile(out)
