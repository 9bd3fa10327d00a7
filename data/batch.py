"""Batches of programs (docs/architecture.md "Batches") and the normalization maxima.

A batch is a dict of tensors for B programs with R statement rows in total:
`rows (R, 174)` raw statement rows with the task's 10 tags appended, `segment (R,)` int64 program
index (non-decreasing), `gemm (B, 8, 23)` raw GEMM matrix, `label (B,)` float32 (0 for unlabelled
candidates), `task (B,)` int64 (records of one task are comparable).

Two builders share one assembly step:
* `make_batch` from per-program arrays: the bridge at tuning time (a few hundred candidates).
* `ProgramStore.batch` from contiguous CSR tensors by vectorized index ops: the DataModule's
  training loop (no per-record Python; the store may live on the GPU).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from data.schema import ACCESS_DIM, GEMM_ROWS, ROW_DIM, STMT_DIM, TAG_DIM

__all__ = ["Batch", "ProgramStore", "compute_scales", "make_batch"]

Batch = dict[str, Tensor]


def _assemble(stmt: Tensor, segment: Tensor, tags: Tensor, gemm: Tensor, label: Tensor, task: Tensor) -> Batch:
    """stmt (R, 164), segment (R,), tags (B, 10) per program -> the batch dict (tags appended per row)."""
    return {
        "rows": torch.cat([stmt, tags[segment]], dim=1),
        "segment": segment,
        "gemm": gemm,
        "label": label,
        "task": task,
    }


def make_batch(
    stmt: Sequence[np.ndarray | Tensor],
    tags: np.ndarray | Tensor,
    gemm: np.ndarray | Tensor | Sequence[np.ndarray | Tensor],
    label: np.ndarray | Tensor | None = None,
    task: np.ndarray | Tensor | None = None,
) -> Batch:
    """Build a batch from per-program arrays.

    Args:
        stmt: B arrays of shape (n_i, 164), raw PerStoreFeature rows (n_i may be 0).
        tags: (10,) workload tags shared by all programs, or (B, 10) per program.
        gemm: (B, 8, 23) raw GEMM matrices (zeros where the pattern was not found), or B (8, 23).
        label: (B,) normalized throughputs; zeros (unlabelled candidates) when None.
        task: (B,) task indices; zeros (one task) when None.

    Returns:
        The batch dict on the CPU, float32 / int64.
    """
    num = len(stmt)
    parts = [torch.as_tensor(s, dtype=torch.float32).reshape(-1, STMT_DIM) for s in stmt]
    lengths = torch.tensor([len(p) for p in parts], dtype=torch.int64)
    rows = torch.cat(parts) if parts else torch.zeros(0, STMT_DIM)
    tags_t = torch.as_tensor(np.asarray(tags), dtype=torch.float32)
    if tags_t.shape == (TAG_DIM,):
        tags_t = tags_t.expand(num, TAG_DIM)
    gemm_t = torch.as_tensor(np.asarray(gemm), dtype=torch.float32).reshape(num, GEMM_ROWS, ACCESS_DIM)
    label_t = torch.zeros(num) if label is None else torch.as_tensor(np.asarray(label), dtype=torch.float32)
    task_t = (
        torch.zeros(num, dtype=torch.int64) if task is None else torch.as_tensor(np.asarray(task), dtype=torch.int64)
    )
    for name, value in (("tags", tags_t), ("label", label_t), ("task", task_t)):
        if value.shape[0] != num:
            raise ValueError(f"make_batch: {name} has {value.shape[0]} entries for {num} programs")
    segment = torch.repeat_interleave(torch.arange(num), lengths)
    return _assemble(rows, segment, tags_t, gemm_t, label_t, task_t)


@dataclass(eq=False)
class ProgramStore(Dataset):
    """All records of a dataset as contiguous tensors (CSR statement rows); `store[idx]` is a batch.

    Used with `DataLoader(store, sampler=<yields index arrays>, batch_size=None)`: each sampler item
    is a whole batch's record indices, gathered here with a handful of vectorized index ops.

    Attributes:
        stmt: (R_total, 164) float32 raw statement rows of all records, record after record.
        stmt_ptr: (N+1,) int64 CSR offsets: the rows of record i are stmt[stmt_ptr[i]:stmt_ptr[i+1]].
        gemm: (N, 8, 23) float32 raw GEMM matrices.
        task_tags: (T, 10) float32 workload tags per task.
        record_task: (N,) int64 task index of every record.
        label: (N,) float32 normalized throughput.
    """

    stmt: Tensor
    stmt_ptr: Tensor
    gemm: Tensor
    task_tags: Tensor
    record_task: Tensor
    label: Tensor

    def __post_init__(self) -> None:
        num = self.gemm.shape[0]
        expected = {
            "stmt": (self.stmt_ptr[-1].item() if len(self.stmt_ptr) else 0, STMT_DIM),
            "stmt_ptr": (num + 1,),
            "gemm": (num, GEMM_ROWS, ACCESS_DIM),
            "task_tags": (self.task_tags.shape[0], TAG_DIM),
            "record_task": (num,),
            "label": (num,),
        }
        for name, shape in expected.items():
            if tuple(getattr(self, name).shape) != shape:
                raise ValueError(f"ProgramStore.{name} has shape {tuple(getattr(self, name).shape)}, expected {shape}")
        # Batch sizes are computed from a CPU copy, so a GPU store never syncs to size a gather.
        self._ptr_cpu = self.stmt_ptr.cpu()

    @classmethod
    def from_shards(cls, data) -> ProgramStore:
        """All records of `data` (a `data.shards.ShardData`), sharing its arrays' memory."""
        return cls(**{f.name: torch.from_numpy(getattr(data, f.name)) for f in fields(cls)})

    def __len__(self) -> int:
        return self.gemm.shape[0]

    @property
    def device(self) -> torch.device:
        return self.stmt.device

    def to(self, device: torch.device | str) -> ProgramStore:
        """A copy with all data tensors on `device` (e.g. the GPU, to slice batches there)."""
        return ProgramStore(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    def record_rows(self, records: Tensor, total: int) -> tuple[Tensor, Tensor]:
        """Row indices into `stmt` of the given records, and their program index within `records`.

        Args:
            records: (B,) int64 record indices, on the store's device.
            total: R, the number of rows of these records (known on the CPU, so sizing the
                output needs no device sync).

        Returns:
            row_index (R,) and segment (R,) int64 on the store's device.
        """
        start = self.stmt_ptr[records]
        lengths = self.stmt_ptr[records + 1] - start
        segment = torch.repeat_interleave(torch.arange(len(records), device=records.device), lengths, output_size=total)
        first = torch.cumsum(lengths, 0) - lengths
        row_index = start[segment] + torch.arange(total, device=records.device) - first[segment]
        return row_index, segment

    def __getitem__(self, records: Tensor | np.ndarray | Sequence[int]) -> Batch:
        """The batch of the given records (B,), in that order, on the store's device.

        On a GPU store the only host-to-device copy is the (B,) index vector, from pinned memory,
        so the CPU can queue the next steps while the GPU works.
        """
        records = torch.as_tensor(records, dtype=torch.int64).reshape(-1).cpu()
        total = int((self._ptr_cpu[records + 1] - self._ptr_cpu[records]).sum())
        if self.device.type == "cuda":
            records = records.pin_memory().to(self.device, non_blocking=True)
        row_index, segment = self.record_rows(records, total)
        task = self.record_task[records]
        return _assemble(
            self.stmt[row_index], segment, self.task_tags[task], self.gemm[records], self.label[records], task
        )


def compute_scales(batches: Mapping[str, Tensor] | Iterable[Mapping[str, Tensor]]) -> tuple[Tensor, Tensor]:
    """Per-column maxima of the statement rows and of the GEMM records, as normalization divisors.

    Pass the TRAINING records only (a finetune keeps the pretrained scales instead). The DataModule
    streams its training records in chunks; the bridge passes the batches it trains on.

    Args:
        batches: one batch dict or an iterable of them (keys `rows` (R, 174) and `gemm` (B, 8, 23)).

    Returns:
        stmt_scale (174,) and access_scale (23,) float32 on the CPU: the column max over all rows
        (over all records and all 8 positions for the GEMM records), 1 where that max is <= 0.
    """
    if isinstance(batches, Mapping):
        batches = [batches]
    stmt_max = torch.zeros(ROW_DIM)
    access_max = torch.zeros(ACCESS_DIM)
    for batch in batches:
        rows, gemm = batch["rows"], batch["gemm"]
        if rows.shape[0]:
            stmt_max = torch.maximum(stmt_max, rows.amax(dim=0).float().cpu())
        if gemm.shape[0]:
            access_max = torch.maximum(access_max, gemm.reshape(-1, ACCESS_DIM).amax(dim=0).float().cpu())
    return (
        torch.where(stmt_max > 0, stmt_max, torch.ones_like(stmt_max)),
        torch.where(access_max > 0, access_max, torch.ones_like(access_max)),
    )
