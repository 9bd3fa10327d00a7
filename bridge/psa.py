"""PSA, the parameterized static analyzer: Pruner's cheap "draft" model (docs/pruner.md section 4).

PSA turns the 12-wide rows of a program (one per stored buffer, computed by
`data.features.featurize_candidates(..., stmt=False)`) and one row of a device table into an
analytic latency estimate; the score is its inverse. It never trains, which is what makes it cheap
enough to score every member of a 1536-schedule population per generation.

The scoring function (`psa_scores`) is plain numpy on the rows, so benchmarks score shard records
directly; `PSACostModel` is the MetaSchedule adapter used by `bridge.search.DraftVerifySearch`.

Device table: `bridge/devices.yaml` (package data, so an installed wheel has it) holds every row
of docs/pruner.md section 4.3; a user adds a device with a YAML file of the same shape (`load_devices(path)`), and `get_device("auto")` picks the row of the
running GPU by name and reads its SM count (and warp size) from the driver.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import yaml
from tvm.ir.utils import derived_object

from bridge.config import DEFAULT_PSA_FORMULA, PSA_FORMULAS
from data.atomic import atomic_write_text
from data.features import FeatureCache, WalkPool, default_walk_workers
from data.schema import PSA_DIM
from tvm_env import ms

__all__ = [
    "DEVICES_FILE",
    "DEFAULT_FORMULA",
    "FORMULAS",
    "Device",
    "PSACostModel",
    "get_device",
    "load_devices",
    "naive_scores",
    "psa_latency",
    "psa_scores",
    "stage_time",
]

DEVICES_FILE = Path(__file__).resolve().parent / "devices.yaml"
"""The built-in device table (docs/pruner.md section 4.3)."""

# Column indices of a PSA row (docs/pruner.md section 4.1).
(
    FLOPS_PER_THREAD,
    TOTAL_FLOPS,
    REGISTERS,
    MEMORY_WORK,
    SHARED_FOOTPRINT,
    DRAM,
    REUSE,
    IS_GPU,
    GRID,
    BLOCK,
    VTHREAD,
    DRAM_ALL,
) = range(PSA_DIM)

FORMULAS = PSA_FORMULAS
"""Scoring formulas: `published` is docs/pruner.md section 4.2 verbatim; `occupancy` also applies the
kernel's occupancy (`peak_penalty * warp_penalty`) to its memory time, so a kernel with too few
blocks or partially filled warps cannot reach full DRAM bandwidth either (docs/pruner.md section 4.4 notes
that the published memory time has no such penalty). The `traffic` formulas take the memory time
from the DRAM traffic over every trip of the serial loops (PSA column 11) instead of one pass of a
split reduction (column 5), without and with the occupancy penalty. `traffic-warps` is
`traffic-occupancy` with latency hiding: the published model lets one block at a time run on an SM
(`active_blocks_per_sm` 1), so a block of one warp counts as much as one of four; but an SM
partition hides memory and pipeline latency only with several warps to switch between. The
row's time is divided by min(1, resident warps per partition / `HIDING_WARPS`), the resident warps
being min(blocks per SM, `MAX_BLOCKS_PER_SM`) x warps a block, at most `MAX_WARPS_PER_SM`
(docs/benchmarks.md, "PSA and latency hiding"). `traffic-stages` is `traffic-occupancy` plus, per program,
the time of its reduction's stages that no other work hides: a block loads its shared tiles once a
stage and waits for them (a global-memory round trip and a barrier), so a kernel of n stages pays n
such waits per wave of blocks whatever its bandwidth and compute (`stage_time`)."""

STAGE_LATENCY = 7e-5
"""The wait of one stage in one wave of blocks under `traffic-stages`, in `psa_latency`'s units
(milliseconds at the device table's peak): 70 ns. Chosen on schedules that tuning runs measured
(23,051, ten workloads pooled one by one) leaving each workload out in turn: every fold chose 7e-5 of
2, 3, 5, 7 x 1e-5 and 1, 2 x 1e-4. On the 34,110 random records of data/h100, which it was not
chosen on, it ranks better than `traffic-occupancy` too (docs/benchmarks.md, "PSA and the
reduction's stages")."""

HIDING_WARPS = 1.0
"""Resident warps per SM partition below which `traffic-warps` charges: 1, a partition with less than
a warp of its own to issue from. Of 0.5, 1, 2 and 4 (4 is the usual rule of thumb for hiding
latency), 1 is the only one that lowers neither peak@1 nor peak@5 on data/h100's random records;
larger values rank them worse (docs/benchmarks.md, "PSA and latency hiding")."""
MAX_BLOCKS_PER_SM, MAX_WARPS_PER_SM = 32, 64
"""Resident blocks and warps per SM on sm_80/sm_90 (NVIDIA's occupancy limits; registers and shared
memory, which can lower them, are not modelled)."""

DEFAULT_FORMULA = DEFAULT_PSA_FORMULA
"""The formula that drafts unless told otherwise: on the 14,137 valid H100 records of data/h100 (219
tasks) it ranks 0.862 / 0.770 / 0.889 pairwise / peak@1 / peak@5 against 0.842 / 0.588 / 0.773 for
`published`, and on the 3,005 schedules that the 240 s tuning-suite arms measured (two workloads,
pooled) 0.714 / 0.758 / 0.806 against 0.520 / 0.280 / 0.428 (docs/benchmarks.md, "PSA's DRAM
traffic over every trip")."""


@dataclasses.dataclass(frozen=True)
class Device:
    """One row of the PSA device table.

    Attributes:
        name: table key, e.g. "h100".
        peak_gflops: fp32 peak without tensor cores, GFLOP/s.
        bandwidth_gbs: DRAM bandwidth, GB/s.
        sm_count: streaming multiprocessors (SM).
        sm_partitions: warp schedulers per SM (P).
        warp_size: threads per warp.
        active_blocks_per_sm: resident thread blocks per SM the model assumes (A).
    """

    name: str
    peak_gflops: float
    bandwidth_gbs: float
    sm_count: int
    sm_partitions: int = 4
    warp_size: int = 32
    active_blocks_per_sm: int = 1

    @classmethod
    def from_mapping(cls, name: str, row: object, where: str) -> Device:
        """A device from one YAML row; `where` (the file) goes into every error message."""
        if not isinstance(row, dict):
            raise ValueError(f"{where}: device {name!r} must be a mapping of fields, got {row!r}")
        fields = {f.name for f in dataclasses.fields(cls)} - {"name"}
        unknown = set(row) - fields
        if unknown:
            raise ValueError(f"{where}: device {name!r} has unknown fields {sorted(unknown)}; known: {sorted(fields)}")
        try:
            device = cls(name=name, **row)
        except TypeError as err:  # a required field is missing
            raise ValueError(f"{where}: device {name!r}: {err}") from None
        for field in fields:
            value = getattr(device, field)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{where}: device {name!r}: {field}={value!r} must be a positive number")
        return device


def load_devices(path: str | os.PathLike | None = None) -> dict[str, Device]:
    """The built-in device table, updated with the rows of the user's YAML file `path`.

    Raises:
        FileNotFoundError: `path` does not exist (the message names it).
        ValueError: a file that is not a YAML mapping of device rows, or a malformed row (names the
            file and the device).
    """
    devices: dict[str, Device] = {}
    for file in [DEVICES_FILE] + ([Path(path)] if path is not None else []):
        if not file.is_file():
            raise FileNotFoundError(f"PSA device table {str(file)!r} does not exist")
        try:
            table = yaml.safe_load(file.read_text())
        except yaml.YAMLError as err:
            raise ValueError(f"{file}: not valid YAML: {err}") from None
        if not isinstance(table, dict) or not table:
            raise ValueError(
                f"{file}: expected a mapping 'name: {{peak_gflops: ..., ...}}', got {type(table).__name__}"
            )
        for name, row in table.items():
            devices[str(name)] = Device.from_mapping(str(name), row, str(file))
    return devices


def _running_gpu() -> tuple[str, int, int] | None:
    """(name, SM count, warp size) of CUDA device 0, or None without a GPU."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return props.name, int(props.multi_processor_count), int(getattr(props, "warp_size", 32))


def get_device(name: str, devices_file: str | os.PathLike | None = None) -> Device:
    """The device row `name`; "auto" picks the running GPU's row and takes its SM count from the driver.

    "auto" matches the table keys against the driver's device name (longest key first, ignoring
    case, '_' and '-'; e.g. "NVIDIA H100 80GB HBM3" -> h100), then replaces the row's SM count and
    warp size by the driver's values.

    Raises:
        ValueError: unknown name (lists the known ones), or "auto" without a GPU or without a
            matching row.
    """
    devices = load_devices(devices_file)
    if name != "auto":
        if name not in devices:
            raise ValueError(
                f"PSA device {name!r} is not in the device table; known: {sorted(devices)} (add rows with a YAML file)"
            )
        return devices[name]
    gpu = _running_gpu()
    if gpu is None:
        raise ValueError("PSA device 'auto' needs a CUDA GPU; name a row of the device table instead")
    gpu_name, sm_count, warp_size = gpu
    flat = gpu_name.lower().replace("-", "").replace(" ", "")
    for key in sorted(devices, key=len, reverse=True):
        if key.lower().replace("_", "").replace("-", "") in flat:
            return dataclasses.replace(devices[key], sm_count=sm_count, warp_size=warp_size)
    raise ValueError(f"no PSA device row matches the running GPU {gpu_name!r}; known: {sorted(devices)}")


def _concat(programs: Sequence[np.ndarray | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of all programs (P, 12), each row's program index (P,), and which programs have rows (n,)."""
    valid = np.array([p is not None and len(p) > 0 for p in programs], dtype=bool)
    parts = [np.asarray(p, dtype=np.float64).reshape(-1, PSA_DIM) for p, ok in zip(programs, valid) if ok]
    rows = np.concatenate(parts) if parts else np.zeros((0, PSA_DIM))
    segment = np.repeat(np.flatnonzero(valid), [len(p) for p in parts]).astype(np.int64)
    return rows, segment, valid


def _warps(rows: np.ndarray, device: Device) -> np.ndarray:
    """Whole warps a block of each row (at least one)."""
    return np.maximum(np.ceil(rows[:, BLOCK] / device.warp_size), 1.0)


def psa_latency(rows: np.ndarray, device: Device, formula: str = DEFAULT_FORMULA) -> np.ndarray:
    """Estimated time of each PSA row (docs/pruner.md section 4.2): max(compute time, memory time).
    (`traffic-stages`' rows are `traffic-occupancy`'s; its per-program term is `stage_time`.)

    Args:
        rows: (P, 12) PSA rows.
        device: the device row.
        formula: one of `FORMULAS`.

    Returns:
        (P,) float64 per-row times (the spec's ms-like units; only ratios matter).
    """
    if formula not in FORMULAS:
        raise ValueError(f"formula={formula!r} must be one of {FORMULAS}")
    rows = np.asarray(rows, dtype=np.float64)
    if rows.ndim != 2 or rows.shape[1] != PSA_DIM:
        raise ValueError(f"PSA rows must have shape (P, {PSA_DIM}), got {rows.shape}")
    grid, block, reuse = rows[:, GRID], rows[:, BLOCK], rows[:, REUSE]
    sm, parts, active = device.sm_count, device.sm_partitions, device.active_blocks_per_sm
    warps_f = block / device.warp_size
    warps = _warps(rows, device)
    warp_penalty = warps_f / warps
    thread_penalty = 1.0 + 1.0 / np.where(reuse > 0, reuse, 1.0)
    mid = grid < active * sm
    act = np.where(mid & (warps < parts), warps, np.where(mid, parts, 1.0))
    units = grid * act
    total = np.where(mid, parts * sm, active * sm)
    peak_penalty = units / (np.maximum(np.ceil(units / total), 1.0) * total)
    reg_penalty = np.where(rows[:, REGISTERS] >= 128, rows[:, REGISTERS] / 128.0, 1.0)
    occupancy = np.maximum(peak_penalty * warp_penalty, 1e-12)
    compute = rows[:, TOTAL_FLOPS] * thread_penalty / (device.peak_gflops * occupancy / reg_penalty) / 1e6
    traffic = rows[:, DRAM_ALL] if formula.startswith("traffic") else rows[:, DRAM]
    memory = traffic / device.bandwidth_gbs * 1000.0 / 2**30
    if formula.endswith("occupancy") or formula in ("traffic-warps", "traffic-stages"):
        memory = memory / occupancy
    time = np.maximum(compute, memory)
    if formula == "traffic-warps":
        blocks_per_sm = np.minimum(np.ceil(grid / sm), MAX_BLOCKS_PER_SM)
        resident = np.minimum(blocks_per_sm * warps, MAX_WARPS_PER_SM)
        time = time / np.minimum(1.0, resident / parts / HIDING_WARPS)
    return time


def stage_time(
    rows: np.ndarray, segment: np.ndarray, n: int, device: Device, latency: float = STAGE_LATENCY
) -> np.ndarray:
    """`traffic-stages`' addition to each of `n` programs' time: `latency` x stages x waves.

    A program's stages are the most trips of any of its shared-memory loads (column 11 over column 5
    of a row with a shared footprint: how many times the loops that do not index the tile reload it),
    its waves the most of any of those rows: ceil(grid / (SMs x resident blocks an SM)), with resident
    blocks as NVIDIA's limits allow (`MAX_BLOCKS_PER_SM` blocks, `MAX_WARPS_PER_SM` warps; shared
    memory and registers, which can lower them, are not modelled). A program without a shared
    load pays nothing. In a program of several kernels the stages of one may be paired with the
    waves of another (the measured formula; a per-kernel product is not yet measured).
    """
    rows = np.asarray(rows, dtype=np.float64)
    shared = (rows[:, SHARED_FOOTPRINT] > 0) & (rows[:, DRAM] > 0)
    trips = np.where(shared, rows[:, DRAM_ALL] / np.where(shared, rows[:, DRAM], 1.0), 0.0)
    warps = _warps(rows, device)
    resident = np.maximum(np.minimum(MAX_BLOCKS_PER_SM, np.floor(MAX_WARPS_PER_SM / warps)), 1.0)
    waves = np.ceil(rows[:, GRID] / (device.sm_count * resident))
    stages, program_waves = np.zeros(n), np.zeros(n)
    np.maximum.at(stages, segment, trips)
    np.maximum.at(program_waves, segment, np.where(shared, waves, 0.0))
    return latency * stages * program_waves


def psa_scores(
    programs: Sequence[np.ndarray | None],
    device: Device,
    formula: str = DEFAULT_FORMULA,
    stage_latency: float = STAGE_LATENCY,
) -> np.ndarray:
    """PSA score = 1 / (sum of row times) of each program; higher = faster (under `traffic-stages`, plus
    the program's `stage_time` at `stage_latency`).

    Args:
        programs: n arrays of shape (k_i, 12) (PSA rows of one program), None where featurizing failed.
        device: the device row.
        formula: one of `FORMULAS`.
        stage_latency: `traffic-stages`' wait of one stage in one wave (`STAGE_LATENCY`).

    Returns:
        (n,) float64; -inf for a program without rows (failed lowering: never chosen), +inf for a
        program whose rows estimate no work at all.
    """
    rows, segment, valid = _concat(programs)
    latency = np.bincount(segment, weights=psa_latency(rows, device, formula), minlength=len(programs))
    if formula == "traffic-stages":
        latency += stage_time(rows, segment, len(programs), device, stage_latency)
    with np.errstate(divide="ignore"):
        scores = 1.0 / latency
    scores[~valid] = -np.inf
    return scores


def naive_scores(programs: Sequence[np.ndarray | None]) -> np.ndarray:
    """The naive heuristic of docs/pruner.md section 4.4, "more threads first": max over rows of grid x block.

    Returns:
        (n,) float64; -inf for a program without rows.
    """
    rows, segment, valid = _concat(programs)
    threads = np.zeros(len(programs))
    np.maximum.at(threads, segment, rows[:, GRID] * rows[:, BLOCK])
    threads[~valid] = -np.inf
    return threads


@derived_object
class PSACostModel(ms.cost_model.PyCostModel):
    """PSA as a MetaSchedule cost model: featurizes candidates without PerStoreFeature and scores them.

    `update` does nothing (PSA has no parameters). Scores of programs whose lowering failed are 0,
    which the evolutionary search treats as "never pick as a parent".
    """

    def __init__(
        self,
        *,
        device: Device | str = "h100",
        formula: str = DEFAULT_FORMULA,
        devices_file: str | None = None,
        workers: int | None = None,
        features: FeatureCache | None = None,
    ):
        """
        Args:
            device: a `Device` or the name of a row of the device table ("auto": the running GPU).
            formula: one of `FORMULAS`.
            devices_file: a user YAML file with more device rows.
            workers: processes walking the TIR of large batches (`data.features.WalkPool`); None:
                `data.features.default_walk_workers()`.
            features: the run's shared `FeatureCache` (the verifier then reuses PSA's walk of the
                potential space); None: a cache of its own.
        """
        super().__init__()
        if formula not in FORMULAS:
            raise ValueError(f"formula={formula!r} must be one of {FORMULAS}")
        self.device = device if isinstance(device, Device) else get_device(device, devices_file)
        self.formula = formula
        if features is None:
            features = FeatureCache(pool=WalkPool(default_walk_workers() if workers is None else workers))
        self.features = features

    def load(self, path: str) -> None:
        """Restore the device row and formula written by `save`."""
        with open(path) as f:
            state = json.load(f)
        self.device = Device(**state["device"])
        self.formula = state["formula"]

    def save(self, path: str) -> None:
        atomic_write_text(path, json.dumps({"device": dataclasses.asdict(self.device), "formula": self.formula}))

    def update(self, context, candidates, results) -> None:  # PSA never trains
        return None

    def predict(self, context, candidates) -> np.ndarray:
        """(n,) float64 PSA scores, finite and >= 0 (0: lowering failed), higher = faster."""
        features = self.features.featurize(context, candidates, stmt=False)
        scores = psa_scores([None if f is None else f.psa for f in features], self.device, self.formula)
        scores[np.isneginf(scores)] = 0.0
        # No estimated work at all: rank first, with a finite weight (the scores are summed into
        # parent-sampling probabilities, where a float max would overflow).
        finite = scores[np.isfinite(scores)]
        scores[np.isposinf(scores)] = 2.0 * finite.max() if finite.size and finite.max() > 0 else 1.0
        return scores
