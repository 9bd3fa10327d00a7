"""The TenSet MLP baseline (docs/pruner.md section 3): the "Ansor / TensetMLP" row of every
comparison. Same statement rows as PAM, no GEMM input; built from PAM's statement encoder and
residual decoder (TenSet's SegmentSumMLP with `use_norm=False`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from torch import Tensor

from data.schema import ROW_DIM
from pruner_models.pam import CostNet, ResidualDecoder, StatementEncoder

__all__ = ["MLPConfig", "MLPNet"]


@dataclass(frozen=True)
class MLPConfig:
    """Layer sizes of the TenSet MLP; defaults are TenSet's (about 242k parameters).

    Args:
        hidden: width of the statement encoder, the segment sum and the decoder.
        res_blocks: residual blocks in the decoder.
        batch_norm: BatchNorm1d before the residual blocks (TenSet's `use_norm`, off by default).
    """

    hidden: int = 256
    res_blocks: int = 2
    batch_norm: bool = False

    def __post_init__(self) -> None:
        if self.hidden < 1:
            raise ValueError(f"MLPConfig.hidden must be >= 1, got {self.hidden!r}")
        if self.res_blocks < 0:
            raise ValueError(f"MLPConfig.res_blocks must be >= 0, got {self.res_blocks!r}")


class MLPNet(CostNet):
    """rows (R, 174) -> statement encoder -> segment sum (B, hidden) -> residual decoder -> (B,)."""

    def __init__(self, config: MLPConfig = MLPConfig()) -> None:
        super().__init__(ROW_DIM)
        self.config = config
        self.stmt_encoder = StatementEncoder(ROW_DIM, config.hidden)
        self.decoder = ResidualDecoder(config.hidden, config.res_blocks, batch_norm=config.batch_norm)

    def forward(self, batch: Mapping[str, Tensor]) -> Tensor:
        """Scores (B,) float32 of the batch's programs, higher = faster."""
        stmt = self.stmt_encoder(self.rows(batch), batch["segment"], self.num_programs(batch))
        return self.decoder(stmt).float()
