"""Synthetic feature shards of realistic shape with LEARNABLE labels, for tests and benchmarks.

Not measurements: a stand-in where real shards are too slow or too big to make (unit tests on
2 cores, the 1M-record training-speed benchmark). Shapes and value ranges follow the real features
(sparse slog-scale statement rows, one-hot tags, a GEMM matrix for part of the tasks, a few
percent failed measurements), and the latency is a hidden function of the rows and of the GEMM
matrix, so a model that learns beats a random ranking by a clear margin.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from data.labels import normalized_throughput
from data.schema import ACCESS_DIM, GEMM_ROWS, PSA_DIM, STMT_DIM, TAG_DIM
from data.shards import ShardData, write_shard

__all__ = ["synthetic_shard_data", "write_synthetic_shards"]


def synthetic_shard_data(
    num_tasks: int = 8,
    records_per_task: int = 64,
    networks: tuple[str, ...] = ("net_a", "net_b", "net_c", "net_d"),
    rows_per_record: tuple[int, int] = (2, 12),
    failed_fraction: float = 0.03,
    noise: float = 0.05,
    seed: int = 0,
    task_offset: int = 0,
) -> ShardData:
    """Tasks with records whose latency is exp(-(w . sum of rows + v . gemm) + noise).

    Task i belongs to network i % len(networks); every 4th task is shared with the next network
    too (so a hold-out split must move shared tasks to the held-out side).

    Args:
        num_tasks: T.
        records_per_task: records of every task.
        networks: network names.
        rows_per_record: (low, high) statement rows per program, uniform, high exclusive.
        failed_fraction: fraction of records that failed (latency inf, label 0).
        noise: standard deviation of the log-latency noise.
        seed: seeds everything, including the hidden weights (same seed, same function).
        task_offset: first task number (keeps task keys unique over several shards).

    Returns:
        A validated ShardData of T * records_per_task records.
    """
    rng = np.random.default_rng(seed)
    hidden = np.random.default_rng(12345)  # the hidden function is the same for every shard
    w_stmt = hidden.normal(size=STMT_DIM) * (hidden.random(STMT_DIM) < 0.05) / 20.0
    w_gemm = hidden.normal(size=(GEMM_ROWS, ACCESS_DIM)) * (hidden.random((GEMM_ROWS, ACCESS_DIM)) < 0.05) / 5.0
    col_scale = hidden.choice([1.0, 8.0, 25.0], size=STMT_DIM)

    n = num_tasks * records_per_task
    record_task = np.repeat(np.arange(num_tasks), records_per_task)
    lengths = rng.integers(rows_per_record[0], rows_per_record[1], size=n)
    ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    # Rows are drawn from a pool of distinct sparse rows (like PerStoreFeature rows, 60% zeros):
    # a gather instead of R x 164 random draws keeps a 1M-record benchmark set quick to make.
    pool = (rng.random((4096, STMT_DIM)) * col_scale * (rng.random((4096, STMT_DIM)) < 0.4)).astype(np.float32)
    pick = rng.integers(0, len(pool), size=ptr[-1])
    stmt = pool[pick]
    has_gemm = rng.random(num_tasks) < 0.5
    gemm_found = has_gemm[record_task]
    gemm = rng.random((n, GEMM_ROWS, ACCESS_DIM), dtype=np.float32) * np.float32(20.0) * gemm_found[:, None, None]

    row_score = np.concatenate([[0.0], np.cumsum((pool @ w_stmt)[pick])])  # w . (sum of a record's rows)
    score = (
        row_score[ptr[1:]] - row_score[ptr[:-1]] + (gemm * w_gemm).sum(axis=(1, 2)) + rng.normal(scale=noise, size=n)
    )
    latency = np.exp(-0.4 * score + rng.normal(size=num_tasks)[record_task]) * 1e-4  # log-latency std ~1 per task
    latency[rng.random(n) < failed_fraction] = np.inf
    label = np.concatenate([normalized_throughput(lat) for lat in np.split(latency, num_tasks)] or [np.zeros(0)])

    access_len = lengths * 3
    access_ptr = np.concatenate([[0], np.cumsum(access_len)]).astype(np.int64)
    psa_ptr = ptr.copy()
    ids = np.arange(task_offset, task_offset + num_tasks)
    task_networks = np.array(
        [networks[i % len(networks)] + ("," + networks[(i + 1) % len(networks)] if i % 4 == 3 else "") for i in ids]
    )
    tags = np.zeros((num_tasks, TAG_DIM), dtype=np.float32)
    tags[np.arange(num_tasks), rng.integers(0, TAG_DIM - 1, size=num_tasks)] = 1.0
    data = ShardData(
        task_key=np.array([f"synthetic/task_{i:05d}" for i in ids]),
        task_name=np.array([f"fused_op_{i}" for i in ids]),
        task_networks=task_networks,
        task_target=np.array(['{"kind": "llvm"}'] * num_tasks),
        task_weight=np.ones(num_tasks),
        task_network_weights=np.array([json.dumps({nets.split(",")[0]: 1}) for nets in task_networks]),
        task_flops=np.full(num_tasks, 1e6),
        task_tags=tags,
        record_task=record_task.astype(np.int64),
        record_source=np.array([f"synthetic:{i}" for i in range(n)]),
        latency=latency.astype(np.float64),
        label=label.astype(np.float32),
        stmt_ptr=ptr,
        stmt=stmt,
        access_ptr=access_ptr,
        access=np.resize(pool[:, :ACCESS_DIM], (access_ptr[-1], ACCESS_DIM)),
        psa_ptr=psa_ptr,
        psa=np.resize(pool[:, :PSA_DIM], (psa_ptr[-1], PSA_DIM)),
        gemm=gemm,
        gemm_found=gemm_found,
    )
    data.validate("synthetic_shard_data")
    return data


def _write_one(directory: Path, index: int, num_tasks: int, seed: int, kwargs: dict) -> Path:
    data = synthetic_shard_data(num_tasks=num_tasks, seed=seed + index, task_offset=index * num_tasks, **kwargs)
    path = directory / f"shard_{index:03d}.h5"
    write_shard(path, data, {"source": "data.synthetic", "seed": seed + index})
    return path


def write_synthetic_shards(
    directory: str | os.PathLike, num_shards: int = 2, num_tasks: int = 8, seed: int = 0, workers: int = 1, **kwargs
) -> list[Path]:
    """Write `num_shards` shards of `num_tasks` disjoint tasks each into `directory`.

    Args:
        directory: created if missing.
        num_shards: files to write (shard_000.h5, ...).
        num_tasks: tasks per shard.
        seed: shard i uses seed + i.
        workers: processes writing shards in parallel (HDF5 gzip is single-threaded per file).
        kwargs: forwarded to `synthetic_shard_data`.

    Returns:
        The written paths.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    jobs = [(directory, i, num_tasks, seed, kwargs) for i in range(num_shards)]
    if workers <= 1:
        return [_write_one(*job) for job in jobs]
    # spawn: a caller with threads (torch's, TVM's) must not be forked
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_write_one, *zip(*jobs)))
