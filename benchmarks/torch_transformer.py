"""torch_transformer: the decoder-only transformer of nn::TransformerConfig written out in PyTorch, the
reference the benchmarks time myriad's step against (train_step_torch.py on the CPU, the GPU's
gpt2_step_reference.py). No downloaded weights, no Hugging Face.

One model with the knobs of TransformerConfig, so a GPT-2 and a LLaMA-style case each get their own
architecture, not GPT-2's:
  norm       layernorm | rmsnorm     (F.layer_norm with its bias, always, as GPT-2's; F.rms_norm
                                      with none)
  mlp        gelu | swiglu           (tanh GELU of one C x F matrix; SwiGLU: silu(gate) * up, two
                                      C x F matrices, as Hugging Face's LlamaMLP)
  positions  learned | rope          (a learned table, or RoPE rotating pairs (i, i + D/2))
  kv_heads   grouped-query attention (keys and values repeated to the query heads, then PyTorch's
                                      scaled_dot_product_attention, causal)
  bias       biases in the linear layers: q/k/v, the attention's output, the MLP's first matrix
             (SwiGLU's gate, not its up) and its output, as myriad's blocks declare them
  tie        the LM head reuses the token embedding (else an untied C x V matrix)
The parameter count equals myriad's for the same config (with the vocabulary unpadded):
bench_train_step compares the two before it prints a ratio.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class TransformerSpec:
    vocab: int
    layers: int
    heads: int
    channels: int
    block: int
    kv_heads: int = 0  # 0 = heads
    ffn: int = 0  # 0 = 4 C (the GPT-2 width)
    norm: str = "layernorm"
    mlp: str = "gelu"
    positions: str = "learned"
    bias: bool = True
    tie: bool = True
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    init_std: float = 0.02

    def validate(self):
        if self.norm not in ("layernorm", "rmsnorm"):
            raise ValueError(f"norm: {self.norm!r} is not layernorm or rmsnorm")
        if self.mlp not in ("gelu", "swiglu"):
            raise ValueError(f"mlp: {self.mlp!r} is not gelu or swiglu")
        if self.positions not in ("learned", "rope"):
            raise ValueError(f"positions: {self.positions!r} is not learned or rope")
        kv = self.kv_heads or self.heads
        if self.channels % self.heads != 0 or self.heads % kv != 0:
            raise ValueError(f"heads {self.heads} / kv_heads {kv} do not divide channels {self.channels}")
        if self.positions == "rope" and (self.channels // self.heads) % 2 != 0:
            raise ValueError("positions rope needs an even head width")


def build_transformer(torch, spec: TransformerSpec):
    spec.validate()
    nn = torch.nn
    F = torch.nn.functional
    C, H = spec.channels, spec.heads
    KV, D = spec.kv_heads or spec.heads, spec.channels // spec.heads
    FFN = spec.ffn or 4 * C

    class Norm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(C))
            self.bias = nn.Parameter(torch.zeros(C)) if spec.norm == "layernorm" else None

        def forward(self, x):
            if spec.norm == "layernorm":
                return F.layer_norm(x, (C,), self.weight, self.bias, spec.norm_eps)
            return F.rms_norm(x, (C,), self.weight, spec.norm_eps)

    def rotate(x, cos, sin):  # x: (B, heads, T, D); pairs (i, i + D/2)
        first, second = x[..., : D // 2], x[..., D // 2:]
        return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm_1 = Norm()
            self.qkv = nn.Linear(C, (H + 2 * KV) * D, bias=spec.bias)
            self.attn_proj = nn.Linear(C, C, bias=spec.bias)
            self.norm_2 = Norm()
            self.fc = nn.Linear(C, FFN, bias=spec.bias)  # GELU's first matrix, or SwiGLU's gate
            self.up = nn.Linear(C, FFN, bias=False) if spec.mlp == "swiglu" else None
            self.proj = nn.Linear(FFN, C, bias=spec.bias)

        def forward(self, x, rope):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.norm_1(x)).split((H * D, KV * D, KV * D), dim=2)
            q = q.view(b, t, H, D).transpose(1, 2)
            k = k.view(b, t, KV, D).transpose(1, 2)
            v = v.view(b, t, KV, D).transpose(1, 2)
            if rope is not None:
                q, k = rotate(q, *rope), rotate(k, *rope)
            if KV != H:  # each key/value head serves H / KV query heads
                k = k.repeat_interleave(H // KV, dim=1)
                v = v.repeat_interleave(H // KV, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(b, t, C))
            normed = self.norm_2(x)
            if self.up is not None:
                hidden = F.silu(self.fc(normed)) * self.up(normed)
            else:
                hidden = F.gelu(self.fc(normed), approximate="tanh")
            return x + self.proj(hidden)

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(spec.vocab, C)
            self.wpe = nn.Embedding(spec.block, C) if spec.positions == "learned" else None
            self.blocks = nn.ModuleList(Block() for _ in range(spec.layers))
            self.norm_f = Norm()
            self.lm_head = None if spec.tie else nn.Linear(C, spec.vocab, bias=False)
            if spec.positions == "rope":
                inverse = 1.0 / spec.rope_theta ** (torch.arange(0, D // 2, dtype=torch.float64) / (D // 2))
                angles = torch.outer(torch.arange(spec.block, dtype=torch.float64), inverse)
                self.register_buffer("rope_cos", angles.cos().float(), persistent=False)
                self.register_buffer("rope_sin", angles.sin().float(), persistent=False)
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    std = spec.init_std / math.sqrt(2 * spec.layers) if name.endswith("proj.weight") else spec.init_std
                    nn.init.normal_(p, 0.0, std)

        def forward(self, ids, targets):
            t = ids.shape[1]
            x = self.wte(ids)
            if self.wpe is not None:
                x = x + self.wpe(torch.arange(t, device=ids.device))
            rope = (self.rope_cos[:t], self.rope_sin[:t]) if self.wpe is None else None
            for block in self.blocks:
                x = block(x, rope)
            x = self.norm_f(x)
            logits = F.linear(x, self.wte.weight) if self.lm_head is None else self.lm_head(x)
            return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))

    return Transformer()
