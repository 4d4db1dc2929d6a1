#!/usr/bin/env python3
"""A GPT-2 checkpoint not made by troupe: NumPy-drawn weights written as a
Hugging Face folder (model.safetensors and config.json) by a safetensors
writer of a few lines (an 8-byte little-endian header length, a JSON header,
the raw bytes), the way files on the Hub vary: names without the
`transformer.` prefix, the causal-mask buffers `h.{i}.attn.bias` beside the
weights, no `lm_head.weight` (tied to the embedding), and BF16 weights.

usage: gpt2_write_numpy.py FOLDER LAYERS D_MODEL HEADS CONTEXT VOCAB SEED
"""
import json
import struct
import sys

import numpy as np


def bf16(a):
    """The BF16 bytes of `a`, rounded to nearest even, and the f32 values they hold."""
    bits = np.ascontiguousarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")
    return bits.tobytes()


def write_safetensors(path, tensors):
    header, body, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        body.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(body))


def main(folder, layers, d, heads, context, vocab, seed):
    rng = np.random.default_rng(seed)
    t = {}

    def add(name, *shape, std=0.02, mean=0.0):
        t[name] = ("BF16", shape, bf16(mean + std * rng.standard_normal(shape)))

    add("wte.weight", vocab, d)
    add("wpe.weight", context, d, std=0.01)
    for i in range(layers):
        p = f"h.{i}."
        for ln in ("ln_1", "ln_2"):
            add(p + ln + ".weight", d, std=0.1, mean=1.0)
            add(p + ln + ".bias", d, std=0.1)
        add(p + "attn.c_attn.weight", d, 3 * d)  # Conv1D: [in, out]
        add(p + "attn.c_attn.bias", 3 * d)
        add(p + "attn.c_proj.weight", d, d)
        add(p + "attn.c_proj.bias", d)
        add(p + "mlp.c_fc.weight", d, 4 * d)
        add(p + "mlp.c_fc.bias", 4 * d)
        add(p + "mlp.c_proj.weight", 4 * d, d)
        add(p + "mlp.c_proj.bias", d)
        mask = np.tril(np.ones((context, context), dtype="<f4")).reshape(1, 1, context, context)
        t[p + "attn.bias"] = ("F32", mask.shape, mask.tobytes())  # a buffer, not a weight
    add("ln_f.weight", d, std=0.1, mean=1.0)
    add("ln_f.bias", d, std=0.1)
    write_safetensors(f"{folder}/model.safetensors", t)
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": vocab,
              "n_positions": context, "n_embd": d, "n_layer": layers, "n_head": heads,
              "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
    with open(f"{folder}/config.json", "w") as f:
        json.dump(config, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1], *(int(v) for v in sys.argv[2:8]))
