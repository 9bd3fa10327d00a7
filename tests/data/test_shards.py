"""HDF5 shards: round trip, concatenation, schema-version refusal, corruption, manifest."""

import hashlib
import json
import subprocess
import sys

import h5py
import numpy as np
import pytest

from data.schema import SCHEMA_VERSION
from data.shards import (
    FIELDS,
    ShardData,
    ShardError,
    read_manifest,
    read_shard,
    read_shard_attrs,
    read_shards,
    shard_is_valid,
    write_manifest,
    write_shard,
)


def make_data(keys, records_per_task, networks=None, seed=0):
    """A consistent ShardData with random features: 0-3 rows per program in each CSR array."""
    rng = np.random.default_rng(seed)
    n_task, n = len(keys), sum(records_per_task)

    def csr(width):
        ptr = np.concatenate([[0], np.cumsum(rng.integers(0, 4, size=n))]).astype(np.int64)
        return ptr, rng.random((ptr[-1], width), dtype=np.float32)

    stmt_ptr, stmt = csr(164)
    access_ptr, access = csr(23)
    psa_ptr, psa = csr(12)
    latency = rng.uniform(1e-5, 1e-3, size=n)
    latency[0] = np.inf
    return ShardData(
        task_key=np.array(keys),
        task_name=np.array([k.split("/")[-1] for k in keys]),
        task_networks=np.array(networks or [""] * n_task),
        task_target=np.array(['{"kind": "llvm"}'] * n_task),
        task_weight=np.arange(1, n_task + 1, dtype=np.float64),
        task_network_weights=np.array(["{}"] * n_task),
        task_flops=rng.uniform(1e6, 1e9, size=n_task),
        task_tags=rng.integers(0, 2, size=(n_task, 10)).astype(np.float32),
        record_task=np.repeat(np.arange(n_task), records_per_task).astype(np.int64),
        record_source=np.array([f"db/database_tuning_record.json:{i + 1}" for i in range(n)]),
        latency=latency,
        label=rng.random(n, dtype=np.float32),
        stmt_ptr=stmt_ptr,
        stmt=stmt,
        access_ptr=access_ptr,
        access=access,
        psa_ptr=psa_ptr,
        psa=psa,
        gemm=rng.random((n, 8, 23), dtype=np.float32),
        gemm_found=rng.random(n) < 0.5,
    )


def assert_same(a: ShardData, b: ShardData):
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_round_trip_and_byte_identical(tmp_path):
    data = make_data(["cpu/a", "cpu/b"], [3, 5])
    write_shard(tmp_path / "s0.h5", data, {"options": {"failed": "zero"}, "tvm_version": "0.27"})
    write_shard(tmp_path / "s1.h5", data, {"options": {"failed": "zero"}, "tvm_version": "0.27"})
    back = read_shard(tmp_path / "s0.h5")
    assert_same(back, data)
    assert back.task_key.dtype.kind == "U"
    attrs = read_shard_attrs(tmp_path / "s0.h5")
    assert attrs == {"options": {"failed": "zero"}, "tvm_version": "0.27", "schema_version": SCHEMA_VERSION}
    digest = [hashlib.sha256((tmp_path / f"s{i}.h5").read_bytes()).hexdigest() for i in range(2)]
    assert digest[0] == digest[1]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_empty_shard_round_trip(tmp_path):
    write_shard(tmp_path / "e.h5", ShardData.empty(), {})
    back = read_shard(tmp_path / "e.h5")
    assert back.num_records == 0 and back.stmt.shape == (0, 164) and back.gemm.shape == (0, 8, 23)


def test_concat_reindexes_and_filters_networks(tmp_path):
    a = make_data(["cpu/a", "cpu/b"], [3, 2], networks=["resnet,bert", ""], seed=1)
    b = make_data(["cpu/c"], [4], networks=["bert"], seed=2)
    write_shard(tmp_path / "s0.h5", a, {})
    write_shard(tmp_path / "s1.h5", b, {})
    both = read_shards(tmp_path)
    assert both.num_tasks == 3 and both.num_records == 9
    np.testing.assert_array_equal(both.record_task, [0, 0, 0, 1, 1, 2, 2, 2, 2])
    # CSR re-based: record 5 (first of task c) has c's first program rows
    np.testing.assert_array_equal(both.stmt[both.stmt_ptr[5] : both.stmt_ptr[6]], b.stmt[b.stmt_ptr[0] : b.stmt_ptr[1]])
    np.testing.assert_array_equal(both.psa[both.psa_ptr[-2] :], b.psa[b.psa_ptr[-2] :])
    bert = read_shards([tmp_path / "s0.h5", tmp_path / "s1.h5"], networks=["bert"])
    assert bert.task_key.tolist() == ["cpu/a", "cpu/c"]
    np.testing.assert_array_equal(bert.record_task, [0, 0, 0, 1, 1, 1, 1])
    np.testing.assert_array_equal(bert.latency, np.concatenate([a.latency[:3], b.latency]))
    np.testing.assert_array_equal(bert.access, np.concatenate([a.access[: a.access_ptr[3]], b.access]))
    bert.validate()
    assert read_shards(tmp_path, networks=["vit"]).num_records == 0


def test_schema_version_refused_naming_file_and_versions(tmp_path):
    path = tmp_path / "old.h5"
    write_shard(path, make_data(["cpu/a"], [2]), {})
    with h5py.File(path, "a") as h5:
        h5.attrs["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(
        ShardError, match=rf"old\.h5: shard schema version {SCHEMA_VERSION + 1} .* version {SCHEMA_VERSION}"
    ):
        read_shards(tmp_path)
    assert not shard_is_valid(path)


def test_corrupt_and_truncated_files_named(tmp_path):
    path = tmp_path / "s0.h5"
    write_shard(path, make_data(["cpu/a"], [50]), {})
    (tmp_path / "junk.h5").write_text("not hdf5")
    with pytest.raises(ShardError, match=r"junk\.h5: not a readable HDF5 shard"):
        read_shards(tmp_path)
    truncated = tmp_path / "cut.h5"
    truncated.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ShardError, match=r"cut\.h5"):
        read_shard(truncated)
    with h5py.File(path, "a") as h5:
        del h5["gemm"]
    with pytest.raises(ShardError, match=r"s0\.h5: dataset 'gemm' is missing"):
        read_shard(path)
    with pytest.raises(ShardError, match=r"nothere\.h5: no such shard"):
        read_shards(tmp_path / "nothere.h5")
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(ShardError, match=r"empty_dir: no \*\.h5 shard files"):
        read_shards(tmp_path / "empty_dir")


def test_inconsistent_data_is_not_written(tmp_path):
    data = make_data(["cpu/a", "cpu/b"], [2, 2])
    data.stmt_ptr[-1] += 1
    with pytest.raises(ShardError, match=r"bad\.h5: stmt has shape"):
        write_shard(tmp_path / "bad.h5", data, {})
    data = make_data(["cpu/a", "cpu/a"], [2, 2])
    with pytest.raises(ShardError, match="duplicates"):
        write_shard(tmp_path / "bad.h5", data, {})
    assert list(tmp_path.iterdir()) == []


def test_task_in_two_shards_refused(tmp_path):
    write_shard(tmp_path / "s0.h5", make_data(["cpu/a"], [2]), {})
    write_shard(tmp_path / "s1.h5", make_data(["cpu/a"], [3]), {})
    with pytest.raises(ShardError, match=r"s1\.h5: task 'cpu/a' is also in .*s0\.h5"):
        read_shards(tmp_path)


def test_manifest_rebuilt_from_files(tmp_path):
    write_shard(tmp_path / "s0.h5", make_data(["cpu/a", "cpu/b"], [3, 1]), {})
    write_shard(tmp_path / "s1.h5", make_data(["cpu/c"], [2]), {})
    (tmp_path / "s2.h5").write_text("garbage")
    manifest = write_manifest(tmp_path)
    assert read_manifest(tmp_path) == json.loads((tmp_path / "manifest.json").read_text()) == manifest
    assert manifest["num_records"] == 6 and manifest["num_tasks"] == 3
    assert manifest["shards"][0] == {"file": "s0.h5", "records": 4, "tasks": {"cpu/a": 3, "cpu/b": 1}}
    assert [bad["file"] for bad in manifest["invalid"]] == ["s2.h5"]
    out = subprocess.run([sys.executable, "-m", "data.shards", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 1 and "2 shards, 3 tasks, 6 records" in out.stdout and "s2.h5" in out.stderr


def test_reading_does_not_import_tvm(tmp_path):
    write_shard(tmp_path / "s0.h5", make_data(["cpu/a"], [2]), {})
    code = (
        f"import sys; from data.shards import read_shards; read_shards({str(tmp_path)!r}); print('tvm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
