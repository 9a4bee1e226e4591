#!/usr/bin/python3
"""An independent reader of `dtrain export`'s Llama and Mixtral output, in PyTorch: parses
model.safetensors with struct, json and numpy only (no dtrain code, and not transformers), and
runs the forward pass of Hugging Face's LlamaForCausalLM or MixtralForCausalLM in float64 torch,
written from the math of transformers' modeling_llama.py and modeling_mixtral.py as documented
there: RMSNorm (x * rsqrt(mean(x^2) + rms_norm_eps) * weight), q/k/v/o projections,
rotate_half RoPE with inv_freq = 1 / theta^(2i/d) at positions 0..T-1, repeat_kv for the K/V
heads, causal softmax attention, then the MLP: LlamaMLP's down(silu(gate(x)) * up(x)), or
Mixtral's sparse block (router logits = gate(x), softmax over the experts, top-k, the k weights
renormalised to sum 1, and each chosen expert's w2(silu(w1 x) * w3 x) weighted); the final norm,
lm_head or the tied embedding. It scores the batch dtrain wrote with --write-eval-batch and checks
the mean cross-entropy against the loss dtrain printed.

Usage: llama_torch_loss.py MODEL_DIR BATCH_FILE B T DTRAIN_LOSS [REL_TOL]
Exits 1 (with both losses) when |ours - dtrain's| > REL_TOL * dtrain's (default 1e-5).
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_numpy_loss import score  # noqa: E402  (the safetensors parser and the driver)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def llama_mlp(w, p, h):
    gate = h @ w[p + "mlp.gate_proj.weight"].T
    up = h @ w[p + "mlp.up_proj.weight"].T
    return (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T


def mixtral_sparse_block(w, p, h, experts, top_k):
    B, T, C = h.shape
    x = h.reshape(-1, C)
    p = p + "block_sparse_moe."
    routing = torch.softmax(x @ w[p + "gate.weight"].T, dim=-1)
    weights, chosen = torch.topk(routing, top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(x)
    for e in range(experts):
        rows, slot = torch.where(chosen == e)
        if rows.numel() == 0:
            continue
        e_p = p + "experts.%d." % e
        xe = x[rows]
        ye = (torch.nn.functional.silu(xe @ w[e_p + "w1.weight"].T) * (xe @ w[e_p + "w3.weight"].T)
              ) @ w[e_p + "w2.weight"].T
        out.index_add_(0, rows, ye * weights[rows, slot, None])
    return out.reshape(B, T, C)


def forward_loss(arrays, cfg, inputs, targets):
    w = {k: torch.from_numpy(v).to(torch.float64) for k, v in arrays.items()}
    inputs, targets = torch.from_numpy(inputs).long(), torch.from_numpy(targets).long()
    B, T = inputs.shape
    C, NH, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    NKV = cfg.get("num_key_value_heads", NH)
    eps, theta = cfg["rms_norm_eps"], cfg.get("rope_theta", 10000.0)
    HS = C // NH
    mixtral = cfg["model_type"] == "mixtral"
    inv_freq = 1.0 / theta ** (torch.arange(0, HS, 2, dtype=torch.float64) / HS)
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)  # (T, HS/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (T, HS)
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    x = w["model.embed_tokens.weight"][inputs]
    for l in range(L):
        p = "model.layers.%d." % l
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(B, T, NH, HS).transpose(1, 2)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(B, T, NKV, HS).transpose(1, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(B, T, NKV, HS).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(NH // NKV, dim=1)  # repeat_kv
        v = v.repeat_interleave(NH // NKV, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        if mixtral:
            x = x + mixtral_sparse_block(w, p, h, cfg["num_local_experts"],
                                         cfg["num_experts_per_tok"])
        else:
            x = x + llama_mlp(w, p, h)
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    logits = x @ head.T
    return torch.nn.functional.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1)).item()


def check_config(cfg, w):
    assert cfg["model_type"] in ("llama", "mixtral"), cfg["model_type"]
    assert cfg.get("hidden_act", "silu") == "silu", cfg
    assert cfg.get("sliding_window") is None or cfg["sliding_window"] >= cfg[
        "max_position_embeddings"], cfg


if __name__ == "__main__":
    torch.set_num_threads(1)
    score(forward_loss, check_config, "PyTorch Llama/Mixtral")
