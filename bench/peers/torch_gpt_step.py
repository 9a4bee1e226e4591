#!/usr/bin/env python3
"""The PyTorch peer of `dtrain bench train`: the same GPT-2 or Llama training step in one process.

Model (--family gpt): token + learned position embedding, pre-LayerNorm blocks (fused qkv, causal
softmax attention, tanh-GELU MLP of 4x width), final LayerNorm, LM head tied to the token
embedding; GPT-2 initialisation. --family llama: token embedding, pre-RMSNorm blocks (q, k, v
projections with --kv-heads K/V heads repeated for the query heads, rotary positions in the
rotate_half convention at --rope-theta, causal softmax attention, o projection, SwiGLU MLP of
--ffn-hidden: down(silu(gate) * up)), no biases, final RMSNorm, an untied LM head as dtrain's
Llama (--tie-embeddings ties it); the same initialisation's scales. Step: zero_grad(set_to_none), forward, next-token cross-entropy,
backward, AdamW (lr 3e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1). Data: one fixed
random batch. --precision bf16 runs forward and loss under torch.autocast("cpu",
dtype=torch.bfloat16) with fp32 parameters, gradients and optimizer state (PyTorch's CPU mixed
precision), which is what dtrain's --precision bf16 computes too.

Prints one logfmt line per thread count:
  bench=torch_gpt mode=single family=gpt precision=bf16 threads=1 ms_per_step=... tokens_per_s=... loss_first=... loss_last=...
ms_per_step is the median of --steps steps after --warmup untimed ones. torch.set_num_threads(T)
sets the intra-op threads; OpenBLAS (which Debian's torch calls for fp32 GEMM) is set to T too.
Debian 12: apt-get install python3-torch, and run with /usr/bin/python3.
"""
import argparse
import ctypes
import ctypes.util
import math
import statistics
import sys
import time


def set_threads(torch, n):
    torch.set_num_threads(n)
    for name in ("libopenblas.so.0", ctypes.util.find_library("openblas")):
        if not name:
            continue
        try:
            ctypes.CDLL(name).openblas_set_num_threads(n)
            return
        except (OSError, AttributeError):
            pass


def build(torch, a):
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            d = a.hidden
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.mask = torch.tril(torch.ones(a.ctx, a.ctx, dtype=torch.bool))

        def forward(self, x):
            B, T, C = x.shape
            hs = C // a.heads
            q, k, v = (t.view(B, T, a.heads, hs).transpose(1, 2)
                       for t in self.qkv(self.ln1(x)).split(C, dim=2))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = F.softmax(att.masked_fill(~self.mask[:T, :T], float("-inf")), dim=-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(a.vocab, a.hidden)
            self.wpe = nn.Embedding(a.ctx, a.hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(a.layers))
            self.ln_f = nn.LayerNorm(a.hidden)
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    nn.init.zeros_(p)
                elif p.dim() >= 2:
                    residual = name.endswith(("proj.weight", "fc2.weight"))
                    nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * a.layers) if residual else 0.02)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for blk in self.blocks:
                x = blk(x)
            return self.ln_f(x) @ self.wte.weight.t()  # the tied LM head

    torch.manual_seed(0)
    return GPT() if a.family == "gpt" else build_llama(torch, a)


def build_llama(torch, a):
    nn = torch.nn
    F = torch.nn.functional
    hs, kv = a.hidden // a.heads, a.kv_heads or a.heads
    inv_freq = 1.0 / a.rope_theta ** (torch.arange(0, hs, 2, dtype=torch.float32) / hs)
    freqs = torch.outer(torch.arange(a.ctx, dtype=torch.float32), inv_freq)
    cos, sin = torch.cat((freqs, freqs), -1).cos(), torch.cat((freqs, freqs), -1).sin()

    def rotate_half(x):
        return torch.cat((-x[..., hs // 2:], x[..., :hs // 2]), dim=-1)

    class RMSNorm(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            d, f = a.hidden, a.ffn_hidden
            self.ln1, self.ln2 = RMSNorm(d), RMSNorm(d)
            self.q = nn.Linear(d, a.heads * hs, bias=False)
            self.k, self.v = nn.Linear(d, kv * hs, bias=False), nn.Linear(d, kv * hs, bias=False)
            self.o = nn.Linear(d, d, bias=False)
            self.gate, self.up = nn.Linear(d, f, bias=False), nn.Linear(d, f, bias=False)
            self.down = nn.Linear(f, d, bias=False)
            self.mask = torch.tril(torch.ones(a.ctx, a.ctx, dtype=torch.bool))

        def forward(self, x):
            B, T, C = x.shape
            h = self.ln1(x)
            q = self.q(h).view(B, T, a.heads, hs).transpose(1, 2)
            k = self.k(h).view(B, T, kv, hs).transpose(1, 2)
            v = self.v(h).view(B, T, kv, hs).transpose(1, 2)
            q = q * cos[:T] + rotate_half(q) * sin[:T]
            k = k * cos[:T] + rotate_half(k) * sin[:T]
            k = k.repeat_interleave(a.heads // kv, dim=1)
            v = v.repeat_interleave(a.heads // kv, dim=1)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = F.softmax(att.masked_fill(~self.mask[:T, :T], float("-inf")), dim=-1)
            x = x + self.o((att @ v).transpose(1, 2).reshape(B, T, C))
            h = self.ln2(x)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(a.vocab, a.hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(a.layers))
            self.ln_f = RMSNorm(a.hidden)
            self.lm_head = None if a.tie_embeddings else nn.Linear(a.hidden, a.vocab, bias=False)
            for name, p in self.named_parameters():
                if p.dim() >= 2:
                    residual = name.endswith(("o.weight", "down.weight"))
                    nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * a.layers) if residual else 0.02)

        def forward(self, idx):
            x = self.wte(idx)
            for blk in self.blocks:
                x = blk(x)
            head = self.wte.weight if a.tie_embeddings else self.lm_head.weight
            return self.ln_f(x) @ head.t()

    return Llama()


def run(torch, a, threads):
    set_threads(torch, threads)
    model = build(torch, a)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1)
    g = torch.Generator().manual_seed(1234)
    seq = torch.randint(0, a.vocab, (a.batch, a.ctx + 1), generator=g)
    x, y = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
    times, losses = [], []
    for _ in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits.float().view(-1, a.vocab), y.view(-1))
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.item()))
    med = statistics.median(times[a.warmup:])
    tokens = a.batch * a.ctx
    print(f"bench=torch_gpt mode=single family={a.family} precision={a.precision} threads={threads} "
          f"tokens_per_step={tokens} ms_per_step={med * 1e3:.3f} tokens_per_s={tokens / med:.1f} "
          f"loss_first={losses[0]:.4f} loss_last={losses[-1]:.4f} torch={torch.__version__}",
          flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--ctx", type=int, default=64)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--family", choices=["gpt", "llama"], default="gpt")
    p.add_argument("--kv-heads", type=int, default=0, help="llama: K/V heads (0: --heads)")
    p.add_argument("--ffn-hidden", type=int, default=0, help="llama: SwiGLU width F")
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--tie-embeddings", action="store_true", help="llama: tie the LM head")
    p.add_argument("--threads", default="1", help="comma-separated thread counts")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    if a.family == "llama" and a.ffn_hidden <= 0:
        p.error("--family llama needs --ffn-hidden F")
    try:
        import torch
    except ImportError as e:
        sys.exit(f"torch_gpt_step.py: cannot import torch ({e}); apt-get install python3-torch "
                 "and run it with /usr/bin/python3")
    for t in a.threads.split(","):
        run(torch, a, int(t))


if __name__ == "__main__":
    main()
