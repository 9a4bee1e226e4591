#!/usr/bin/python3
"""An independent reader of `dtrain export`'s output: parses model.safetensors with struct, json
and numpy only (no dtrain code), runs Hugging Face GPT-2's forward pass in float64 numpy (Conv1D
weights (in, out), gelu_new = the tanh approximation, LayerNorm eps from config.json, the LM
head tied to wte) on the batch dtrain wrote with --write-eval-batch, and checks the mean
cross-entropy against the loss dtrain printed.

Usage: gpt2_numpy_loss.py MODEL_DIR BATCH_FILE B T DTRAIN_LOSS [REL_TOL]
Exits 1 (with both losses) when |ours - dtrain's| > REL_TOL * dtrain's (default 1e-5).
"""
import json
import math
import struct
import sys

import numpy as np

DTYPES = {"F32": (np.float32, 4), "BF16": (None, 2), "F16": (np.float16, 2)}


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = data[base + begin : base + end]
        if entry["dtype"] == "BF16":
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            values = bits.view(np.float32)
        else:
            values = np.frombuffer(raw, dtype=np.dtype(DTYPES[entry["dtype"]][0]).newbyteorder("<"))
        shape = tuple(entry["shape"])
        assert values.size == math.prod(shape), name
        tensors[name] = values.reshape(shape).astype(np.float64)
    return tensors


def layer_norm(x, w, b, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def gelu_new(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def forward_loss(w, cfg, inputs, targets):
    B, T = inputs.shape
    C, NH, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    eps = cfg["layer_norm_epsilon"]
    HS = C // NH
    x = w["wte.weight"][inputs] + w["wpe.weight"][np.arange(T)][None]
    mask = np.triu(np.ones((T, T), dtype=bool), k=1)
    for l in range(L):
        p = "h.%d." % l
        h = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # (B, T, 3C)
        q, k, v = np.split(qkv, 3, axis=-1)
        heads = lambda a: a.reshape(B, T, NH, HS).transpose(0, 2, 1, 3)  # (B, NH, T, HS)
        q, k, v = heads(q), heads(k), heads(v)
        att = q @ k.transpose(0, 1, 3, 2) / math.sqrt(HS)
        att = np.where(mask, -np.inf, att)
        att = np.exp(att - att.max(axis=-1, keepdims=True))
        att /= att.sum(axis=-1, keepdims=True)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        h = gelu_new(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"], eps)
    logits = x @ w["wte.weight"].T  # (B, T, V): the LM head is tied to wte
    logits -= logits.max(axis=-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    return -np.take_along_axis(logp, targets[..., None], axis=-1).mean()


def score(forward_loss, check_config, family):
    """Reads argv (MODEL_DIR BATCH_FILE B T DTRAIN_LOSS [REL_TOL]), runs `forward_loss` on the
    batch and exits 1 when it differs from dtrain's loss by more than the tolerance."""
    model_dir, batch_file, B, T, expected = sys.argv[1:6]
    tol = float(sys.argv[6]) if len(sys.argv) > 6 else 1e-5
    B, T, expected = int(B), int(T), float(expected)
    cfg = json.load(open(model_dir + "/config.json"))
    w = read_safetensors(model_dir + "/model.safetensors")
    check_config(cfg, w)
    tokens = np.fromfile(batch_file, dtype="<i4")
    assert tokens.size == 2 * B * T, (tokens.size, B, T)
    inputs, targets = tokens[: B * T].reshape(B, T), tokens[B * T :].reshape(B, T)
    loss = forward_loss(w, cfg, inputs, targets)
    rel = abs(loss - expected) / abs(expected)
    print("%s loss %.9f, dtrain's %.9f, relative difference %.2e (tolerance %.0e)"
          % (family, loss, expected, rel, tol))
    sys.exit(0 if rel <= tol else 1)


def check_gpt2(cfg, w):
    assert cfg["model_type"] == "gpt2" and cfg["activation_function"] == "gelu_new", cfg
    C, V = cfg["n_embd"], cfg["vocab_size"]
    assert w["wte.weight"].shape == (V, C), w["wte.weight"].shape
    assert w["h.0.attn.c_attn.weight"].shape == (C, 3 * C), w["h.0.attn.c_attn.weight"].shape


if __name__ == "__main__":
    score(forward_loss, check_gpt2, "numpy GPT-2")
