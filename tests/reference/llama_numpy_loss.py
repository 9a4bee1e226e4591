#!/usr/bin/python3
"""An independent reader of `dtrain export`'s Llama output: parses model.safetensors with struct,
json and numpy only (no dtrain code), runs Hugging Face LlamaForCausalLM's forward pass in
float64 numpy as transformers writes it (RMSNorm with rms_norm_eps, q/k/v/o projections,
rotate_half RoPE with inv_freq = 1 / theta^(2i/d) at positions 0..T-1, repeat_kv for the K/V
heads, silu(gate) * up then down, the final norm, lm_head or the tied embedding) on the batch
dtrain wrote with --write-eval-batch, and checks the mean cross-entropy against the loss dtrain
printed.

Usage: llama_numpy_loss.py MODEL_DIR BATCH_FILE B T DTRAIN_LOSS [REL_TOL]
Exits 1 (with both losses) when |ours - dtrain's| > REL_TOL * dtrain's (default 1e-5).
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_numpy_loss import read_safetensors, score  # noqa: E402  (the same parser and driver)


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def forward_loss(w, cfg, inputs, targets):
    B, T = inputs.shape
    C, NH, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    NKV = cfg.get("num_key_value_heads", NH)
    eps, theta = cfg["rms_norm_eps"], cfg.get("rope_theta", 10000.0)
    HS = C // NH
    inv_freq = 1.0 / theta ** (np.arange(0, HS, 2, dtype=np.float64) / HS)
    freqs = np.outer(np.arange(T, dtype=np.float64), inv_freq)  # (T, HS/2)
    emb = np.concatenate([freqs, freqs], axis=-1)  # (T, HS)
    cos, sin = np.cos(emb)[None, None], np.sin(emb)[None, None]
    mask = np.triu(np.ones((T, T), dtype=bool), k=1)
    x = w["model.embed_tokens.weight"][inputs]
    for l in range(L):
        p = "model.layers.%d." % l
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(B, T, NH, HS).transpose(0, 2, 1, 3)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(B, T, NKV, HS).transpose(0, 2, 1, 3)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(B, T, NKV, HS).transpose(0, 2, 1, 3)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = np.repeat(k, NH // NKV, axis=1)  # repeat_kv
        v = np.repeat(v, NH // NKV, axis=1)
        att = q @ k.transpose(0, 1, 3, 2) / math.sqrt(HS)
        att = np.where(mask, -np.inf, att)
        att = np.exp(att - att.max(axis=-1, keepdims=True))
        att /= att.sum(axis=-1, keepdims=True)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        x = x + y @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        up = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (gate / (1.0 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    logits = x @ head.T
    logits -= logits.max(axis=-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    return -np.take_along_axis(logp, targets[..., None], axis=-1).mean()


def check_llama(cfg, w):
    assert cfg["model_type"] == "llama" and cfg.get("hidden_act", "silu") == "silu", cfg


if __name__ == "__main__":
    score(forward_loss, check_llama, "Llama")
