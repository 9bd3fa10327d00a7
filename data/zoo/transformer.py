"""Transformers: BERT encoders (post-LN), ViT-B/16 (pre-LN, image patches), a GPT-2-style decoder and a
LLaMA-style one (RMSNorm, rotary position embeddings, SwiGLU feed-forward, no biases).

Attention is written out (projections, q.k^T, softmax, att.v) rather than calling
`scaled_dot_product_attention`, so it lowers to batch_matmul + softmax tasks that MetaSchedule tunes.
Two layers per network suffice: further identical layers only raise the weights of the same tasks.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["Bert", "EncoderLayer", "Gpt", "Llama", "LlamaLayer", "PreNormLayer", "RMSNorm", "VisionTransformer"]


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of (b, heads, s, d) in the rotate-half form, with real cos / sin (s, d)
    tables (relax's torch frontend has no complex numbers, which the reference implementation uses)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


def _attention(
    x: torch.Tensor,
    qkv: nn.ModuleList,
    heads: int,
    bias: torch.Tensor | None = None,
    rope: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Multi-head self-attention context, (b, s, h) -> (b, s, h); `bias` (s, s) is added to the scores,
    `rope` (cos, sin), each (s, h / heads), rotates the queries and keys."""
    b, s, h = x.shape
    q, k, v = (proj(x).reshape(b, s, heads, h // heads).transpose(1, 2) for proj in qkv)
    if rope is not None:
        q, k = _rotate(q, *rope), _rotate(k, *rope)
    scores = q @ k.transpose(-1, -2) / math.sqrt(h // heads)
    if bias is not None:
        scores = scores + bias
    return (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, s, h)


class EncoderLayer(nn.Module):
    """Post-LN BERT layer."""

    def __init__(self, hidden: int, heads: int, ffn: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(3))
        self.out = nn.Linear(hidden, hidden)
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.ffn = nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.out(_attention(x, self.qkv, self.heads)))
        return self.ln2(x + self.ffn(x))


class Bert(nn.Module):
    """BERT encoder: (1, seq) int64 token ids -> (1, seq, hidden) states."""

    def __init__(self, hidden: int, heads: int, ffn: int, layers: int, vocab: int = 30522, max_seq: int = 512):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, hidden), nn.Embedding(max_seq, hidden)
        self.ln = nn.LayerNorm(hidden)
        self.layers = nn.Sequential(*(EncoderLayer(hidden, heads, ffn) for _ in range(layers)))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        return self.layers(self.ln(self.tok(ids) + self.pos(pos)))


class PreNormLayer(nn.Module):
    """Pre-LN layer (ViT, GPT-2): x + attn(ln(x)), then x + mlp(ln(x)); causal masking for decoders."""

    def __init__(self, hidden: int, heads: int, ffn: int, causal_len: int = 0):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(3))
        self.out = nn.Linear(hidden, hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(approximate="tanh"), nn.Linear(ffn, hidden))
        # additive mask: 0 on and below the diagonal, -1e4 above (a token sees only its past)
        mask = torch.triu(torch.full((causal_len, causal_len), -1e4), diagonal=1) if causal_len else None
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.shape[1]
        bias = self.mask[:s, :s] if self.mask is not None else None
        x = x + self.out(_attention(self.ln1(x), self.qkv, self.heads, bias))
        return x + self.mlp(self.ln2(x))


class VisionTransformer(nn.Module):
    """ViT (Dosovitskiy et al. 2021): (1, 3, S, S) images -> (1, 1000) logits from the class token.

    S must be a multiple of `patch`; position embeddings are sized for `max_size` and sliced.
    """

    def __init__(
        self,
        patch: int = 16,
        hidden: int = 768,
        heads: int = 12,
        ffn: int = 3072,
        layers: int = 2,
        max_size: int = 512,
        num_classes: int = 1000,
    ):
        super().__init__()
        self.embed = nn.Conv2d(3, hidden, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, hidden) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, (max_size // patch) ** 2 + 1, hidden) * 0.02)
        self.layers = nn.Sequential(*(PreNormLayer(hidden, heads, ffn) for _ in range(layers)))
        self.ln = nn.LayerNorm(hidden)
        self.fc = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x).flatten(2).transpose(1, 2)  # (1, patches, hidden)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.layers(x + self.pos[:, : x.shape[1]])
        return self.fc(self.ln(x[:, 0]))


class Gpt(nn.Module):
    """GPT-2-style decoder: (1, seq) int64 token ids -> (1, seq, vocab) next-token logits."""

    def __init__(
        self, hidden: int = 768, heads: int = 12, ffn: int = 3072, layers: int = 2, vocab: int = 50257, max_seq=1024
    ):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, hidden), nn.Embedding(max_seq, hidden)
        self.layers = nn.Sequential(*(PreNormLayer(hidden, heads, ffn, causal_len=max_seq) for _ in range(layers)))
        self.ln = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        return self.head(self.ln(self.layers(self.tok(ids) + self.pos(pos))))


class RMSNorm(nn.Module):
    """Root-mean-square layer norm (Zhang & Sennrich 2019): x / rms(x) * weight (no mean subtraction, no bias)."""

    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LlamaLayer(nn.Module):
    """LLaMA layer: x + attn(rmsnorm(x)) with rotary q / k and a causal mask, then x + swiglu(rmsnorm(x))."""

    def __init__(self, hidden: int, heads: int, ffn: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = RMSNorm(hidden), RMSNorm(hidden)
        self.qkv = nn.ModuleList(nn.Linear(hidden, hidden, bias=False) for _ in range(3))
        self.out = nn.Linear(hidden, hidden, bias=False)
        self.gate, self.up = nn.Linear(hidden, ffn, bias=False), nn.Linear(hidden, ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x = x + self.out(_attention(self.norm1(x), self.qkv, self.heads, mask, rope))
        h = self.norm2(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    """LLaMA-style decoder (Touvron et al. 2023): (1, seq) int64 token ids -> (1, seq, vocab) next-token logits.

    The defaults are a small one (hidden 1024, 16 heads, SwiGLU width 2816 = 8/3 x 1024 up to a
    multiple of 256, LLaMA's 32000-token vocabulary). The causal mask and the rotary cos / sin
    tables are built once for `max_seq` positions and sliced.
    """

    def __init__(
        self,
        hidden: int = 1024,
        heads: int = 16,
        ffn: int = 2816,
        layers: int = 2,
        vocab: int = 32000,
        max_seq: int = 2048,
        theta: float = 10000.0,
    ):
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(LlamaLayer(hidden, heads, ffn) for _ in range(layers))
        self.norm = RMSNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        # additive mask: 0 on and below the diagonal, -1e4 above (a token sees only its past)
        self.register_buffer("mask", torch.triu(torch.full((max_seq, max_seq), -1e4), diagonal=1), persistent=False)
        dim = hidden // heads
        angles = torch.outer(torch.arange(max_seq).float(), theta ** (-torch.arange(0, dim, 2).float() / dim))
        angles = torch.cat([angles, angles], dim=-1)  # (max_seq, dim): each frequency for both halves
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        s = ids.shape[1]
        x = self.tok(ids)
        for layer in self.layers:
            x = layer(x, self.mask[:s, :s], (self.cos[:s], self.sin[:s]))
        return self.head(self.norm(x))
