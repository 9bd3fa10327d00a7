"""PAM, Pruner's pattern-aware cost model (docs/pruner.md section 1.3), as a plain `nn.Module`.

The network scores programs from a batch dict (`data.batch`): raw statement rows with the
workload tags appended, the program index of every row and the raw 8x23 GEMM matrix. It is kept
free of Lightning so that `bridge/` can load and run it without a Trainer, and free of TVM so that a
GPU machine without TVM can train it.

Normalization lives in the module: `stmt_scale (174,)` and `access_scale (23,)` buffers (the
per-column maxima over the training records, see `batch.compute_scales`) divide the raw inputs, so
they travel in every `state_dict`, checkpoint and exported artifact, and a finetune keeps them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from data.schema import ACCESS_DIM, ROW_DIM

__all__ = ["CostNet", "PAMConfig", "PAMNet", "ResidualDecoder", "StatementEncoder", "segment_sum"]


def segment_sum(values: Tensor, segment: Tensor, num_segments: int) -> Tensor:
    """Sum rows per program without padding.

    Accumulates in float32 (under bf16 autocast the rows are bf16; summing hundreds of them in bf16
    would lose the small statements).

    Args:
        values: (R, H) per-row values.
        segment: (R,) int64 program index of each row, in [0, num_segments).
        num_segments: B, the number of programs (programs without rows get zeros).

    Returns:
        (B, H) float32.
    """
    out = values.new_zeros((num_segments, values.shape[1]), dtype=torch.float32)
    return out.index_add_(0, segment, values.float())


class StatementEncoder(nn.Module):
    """Per-row MLP (Linear in->hidden, ReLU, Linear hidden->hidden, ReLU) and a sum per program.

    Shared by PAM (section 3.1) and the TenSet MLP (section 6).
    """

    def __init__(self, in_dim: int, hidden: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())

    def forward(self, rows: Tensor, segment: Tensor, num_programs: int) -> Tensor:
        """(R, in_dim) normalized rows, (R,) segment -> (B, hidden) float32."""
        return segment_sum(self.mlp(rows), segment, num_programs)


class ResidualDecoder(nn.Module):
    """Optional BatchNorm1d, `blocks` residual blocks x = ReLU(Linear(x)) + x, then Linear dim->1.

    PAM uses BatchNorm (section 3.5); the TenSet MLP does not (TenSet's `use_norm=False`).
    """

    def __init__(self, dim: int, blocks: int, batch_norm: bool) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(dim) if batch_norm else nn.Identity()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(dim, dim), nn.ReLU()) for _ in range(blocks))
        self.out = nn.Linear(dim, 1)

    def forward(self, x: Tensor) -> Tensor:
        """(B, dim) -> (B,) scores, higher = faster."""
        x = self.norm(x)
        for block in self.blocks:
            x = block(x) + x
        return self.out(x).squeeze(-1)


class CostNet(nn.Module):
    """Base of the cost networks: the statement-row scale buffer and the batch conventions.

    Subclasses implement `forward(batch) -> (B,)`. B is taken from `batch["label"]` (always present,
    0 for unlabelled candidates) because a program may have no statement rows at all.
    """

    def __init__(self, row_dim: int) -> None:
        super().__init__()
        self.register_buffer("stmt_scale", torch.ones(row_dim))

    def set_scales(self, stmt_scale: Tensor, access_scale: Tensor | None = None) -> None:
        """Copy the training maxima (see `batch.compute_scales`) into the buffers.

        Args:
            stmt_scale: (row_dim,) positive divisors of the statement rows.
            access_scale: (access_dim,) divisors of the GEMM records; ignored by nets without GEMM input.
        """
        _copy_scale(self.stmt_scale, stmt_scale, "stmt_scale")

    def rows(self, batch: Mapping[str, Tensor]) -> Tensor:
        """(R, row_dim) normalized statement rows."""
        return batch["rows"] / self.stmt_scale

    @staticmethod
    def num_programs(batch: Mapping[str, Tensor]) -> int:
        return batch["label"].shape[0]


def _copy_scale(buffer: Tensor, value: Tensor, name: str) -> None:
    value = torch.as_tensor(value, dtype=buffer.dtype)
    if value.shape != buffer.shape:
        raise ValueError(f"{name} must have shape {tuple(buffer.shape)}, got {tuple(value.shape)}")
    if not bool((value > 0).all()):
        raise ValueError(f"{name} must be positive everywhere (1 where the column max is <= 0), got {value!r}")
    buffer.copy_(value)


@dataclass(frozen=True)
class PAMConfig:
    """Layer sizes of PAM; the defaults are the published ones (about 417k parameters).

    Args:
        stmt_hidden: width of the statement encoder and of the segment sum.
        gemm_hidden: hidden width of the per-access GEMM encoder.
        gemm_embed: GEMM embedding width = attention embed dim.
        heads: attention heads (must divide gemm_embed).
        fuse_hidden: width after fusing statement and GEMM embeddings = decoder width.
        res_blocks: residual blocks in the decoder.
    """

    stmt_hidden: int = 256
    gemm_hidden: int = 64
    gemm_embed: int = 128
    heads: int = 4
    fuse_hidden: int = 256
    res_blocks: int = 2

    def __post_init__(self) -> None:
        for name in ("stmt_hidden", "gemm_hidden", "gemm_embed", "heads", "fuse_hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"PAMConfig.{name} must be >= 1, got {getattr(self, name)!r}")
        if self.res_blocks < 0:
            raise ValueError(f"PAMConfig.res_blocks must be >= 0, got {self.res_blocks!r}")
        if self.gemm_embed % self.heads:
            raise ValueError(f"PAMConfig.heads={self.heads!r} must divide gemm_embed={self.gemm_embed!r}")


class PAMNet(CostNet):
    """Pattern-aware model: statement encoder + GEMM self-attention encoder, fused, residual decoder.

    Forward on a batch of B programs with R statement rows:
    rows (R, 174) -> encoder -> segment sum (B, stmt_hidden);
    gemm (B, 8, 23) -> per-access MLP (B, 8, gemm_embed) -> 4-head self-attention + residual
    -> sum over the 8 positions (B, gemm_embed);
    concat -> Linear+ReLU (B, fuse_hidden) -> BatchNorm, residual blocks -> Linear -> (B,).

    Use `eval()` when scoring candidates: BatchNorm then uses its running statistics, so a
    candidate's score does not depend on its neighbours and a batch of one works (the original
    scored in training mode).
    """

    def __init__(self, config: PAMConfig = PAMConfig()) -> None:
        super().__init__(ROW_DIM)
        self.config = config
        self.register_buffer("access_scale", torch.ones(ACCESS_DIM))
        self.stmt_encoder = StatementEncoder(ROW_DIM, config.stmt_hidden)
        self.gemm_encoder = nn.Sequential(
            nn.Linear(ACCESS_DIM, config.gemm_hidden),
            nn.ReLU(),
            nn.Linear(config.gemm_hidden, config.gemm_embed),
            nn.ReLU(),
        )
        self.attention = nn.MultiheadAttention(config.gemm_embed, config.heads, dropout=0.0, batch_first=True)
        self.fuse = nn.Sequential(nn.Linear(config.stmt_hidden + config.gemm_embed, config.fuse_hidden), nn.ReLU())
        self.decoder = ResidualDecoder(config.fuse_hidden, config.res_blocks, batch_norm=True)

    def set_scales(self, stmt_scale: Tensor, access_scale: Tensor | None = None) -> None:
        if access_scale is None:
            raise ValueError("PAMNet.set_scales needs access_scale (23,), got None")
        super().set_scales(stmt_scale)
        _copy_scale(self.access_scale, access_scale, "access_scale")

    def forward(self, batch: Mapping[str, Tensor]) -> Tensor:
        """Scores (B,) float32 of the batch's programs, higher = faster."""
        num = self.num_programs(batch)
        stmt = self.stmt_encoder(self.rows(batch), batch["segment"], num)
        gemm = self.gemm_encoder(batch["gemm"] / self.access_scale)  # (B, 8, E)
        attended, _ = self.attention(gemm, gemm, gemm, need_weights=False)
        gemm = (attended + gemm).sum(dim=1)  # (B, E)
        fused = self.fuse(torch.cat([stmt, gemm.to(stmt.dtype)], dim=1))
        return self.decoder(fused).float()
