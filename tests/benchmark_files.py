"""What the tests of `benchmarks/` scripts share: loading a script as a module (benchmarks/ is not a
package) and writing a small synthetic shard folder for them to run on for real."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from data.shards import write_shard
from data.synthetic import synthetic_shard_data

REPO = Path(__file__).resolve().parents[1]


def load_benchmark(name: str) -> ModuleType:
    """`benchmarks/<name>.py` as a module named `<name>_benchmark` (`gpu/keep`: benchmarks/gpu/keep.py)."""
    module_name = f"{name.replace('/', '_')}_benchmark"
    spec = importlib.util.spec_from_file_location(module_name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def small_shards(path: Path, records_per_task: int = 60, seed: int = 3, source: str = "test") -> Path:
    """One shard of 8 synthetic tasks (networks net_a / net_b, 3-4 statement rows a record) in `path`."""
    data = synthetic_shard_data(num_tasks=8, records_per_task=records_per_task, rows_per_record=(3, 4), seed=seed)
    write_shard(Path(path) / "shard.h5", data, {"source": source})
    return Path(path)
