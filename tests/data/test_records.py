"""Record reading: databases and TenSet-style trees, and every bad-input case on real files."""

import json
import lzma
import math
import shutil
from pathlib import Path

import pytest

from data.records import read_records

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tiny_records"
DEVICE = "llvm-sapphirerapids-2c"
MATMUL = "matmul_e87e4aed"
CONV = "conv2d_nhwc_e7d8f54e"


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "tree"
    shutil.copytree(FIXTURE, root)
    return root


def record_file(root: Path, task: str) -> Path:
    return root / DEVICE / task / "database_tuning_record.json"


def replace_lines(path: Path, first: int, *lines: str) -> None:
    """Overwrite lines first, first + 1, ... (1-based) of a record file."""
    text = path.read_text().splitlines()
    text[first - 1 : first - 1 + len(lines)] = lines
    path.write_text("\n".join(text) + "\n")


def append(path: Path, *lines: str) -> int:
    """Append lines to a record file; returns the (1-based) line number of the first one."""
    text = path.read_text()
    path.write_text(text + "".join(line + "\n" for line in lines))
    return len(text.splitlines()) + 1


def good_line(root: Path) -> list:
    return json.loads(record_file(root, MATMUL).read_text().splitlines()[0])


def test_tree_root_device_and_database_give_the_same_records(tree):
    full = read_records([tree])
    assert list(full.tasks) == [f"{DEVICE}/{CONV}", f"{DEVICE}/{MATMUL}"]
    mm = full.tasks[f"{DEVICE}/{MATMUL}"]
    assert mm.name == "matmul" and mm.flops == 2 * 64**3 and mm.networks == () and mm.weight == 1
    assert len(mm.records) == 24 and all(r.valid and r.latency > 0 for r in mm.records)
    assert mm.records[0].source == f"{record_file(tree, MATMUL)}:1"
    assert mm.records[0].latency == pytest.approx(sum(mm.records[0].run_secs) / 2)
    assert mm.target["mcpu"] == "sapphirerapids" and mm.records[0].args_info[0][0] == "TENSOR"
    conv = full.tasks[f"{DEVICE}/{CONV}"]  # both files of this task are .json.xz
    assert len(conv.records) == 24 and conv.name == "conv2d_nhwc"
    assert full.summary.kept == full.summary.lines == 48 and full.summary.skipped() == 0

    device = read_records([tree / DEVICE])
    assert list(device.tasks) == list(full.tasks)
    database = read_records([tree / DEVICE / MATMUL])  # a bare database: key from the record's target
    (key,) = database.tasks
    assert key == f"{DEVICE}/{MATMUL}" and len(database.tasks[key].records) == 24


def test_networks_and_weights_from_index(tree):
    index_path = tree / DEVICE / "index.json"
    index = json.loads(index_path.read_text())
    index["networks"] = {"resnet_50": [[MATMUL, 3]], "bert": [[MATMUL, 1], [CONV, 2]]}
    index["tasks"][MATMUL]["networks"] = ["bert", "resnet_50"]
    index_path.write_text(json.dumps(index))
    tasks = read_records([tree]).tasks
    mm = tasks[f"{DEVICE}/{MATMUL}"]
    assert (
        mm.networks == ("bert", "resnet_50")
        and mm.network_weights == {"bert": 1.0, "resnet_50": 3.0}
        and mm.weight == 3
    )
    assert tasks[f"{DEVICE}/{CONV}"].network_weights == {"bert": 2.0}


def test_bad_lines_are_skipped_and_counted_with_file_and_line(tree):
    path = record_file(tree, MATMUL)
    good = good_line(tree)
    unknown = [7, good[1]]
    no_trace = [0, [["not a trace"], [1e-3]]]
    first = append(path, "{not json", json.dumps(no_trace), json.dumps(unknown), json.dumps([0, good[1]]))
    result = read_records([tree])
    s = result.summary
    assert s.counts["malformed line"] == 2 and s.counts["unknown workload"] == 1
    assert s.examples["malformed line"][0].startswith(f"{path}:{first}: ")
    assert s.examples["malformed line"][1].startswith(f"{path}:{first + 1}: trace is not")
    assert s.examples["unknown workload"] == [
        f"{path}:{first + 2}: workload index 7 not in {path.parent / 'database_workload.json'}"
    ]
    # the last appended line repeats line 1: kept once, counted as a duplicate
    assert len(result.tasks[f"{DEVICE}/{MATMUL}"].records) == 24
    assert s.examples["duplicate record"] == [
        f"{path}:{first + 3}: same task, workload and trace as {path}:1; kept once"
    ]
    assert s.lines == 52 and s.kept == 48 and s.skipped() == 4
    text = s.format()
    assert "malformed line: 2" in text and f"{path}:{first + 2}" in text


@pytest.mark.parametrize("failed", ["drop", "zero"])
def test_failed_measurements_by_policy(tree, failed):
    path = record_file(tree, MATMUL)
    bodies = [json.loads(line)[1] for line in path.read_text().splitlines()[1:4]]
    failed_secs = ([1e10], None, [])
    first = 2  # the measurements of lines 2-4 become failures (same traces, so no duplicates)
    replace_lines(path, first, *(json.dumps([0, [b[0], r, *b[2:]]]) for b, r in zip(bodies, failed_secs)))
    result = read_records([tree], failed=failed)
    records = result.tasks[f"{DEVICE}/{MATMUL}"].records
    if failed == "drop":
        assert len(records) == 21 and result.summary.counts["failed measurement"] == 3
        assert result.summary.examples["failed measurement"][0] == f"{path}:{first}: run_secs=[10000000000.0]"
    else:
        assert len(records) == 24 and result.summary.counts["failed measurement (kept, label 0)"] == 3
        assert [math.isinf(r.latency) for r in records[1:4]] == [True] * 3 and not records[3].valid
        assert result.summary.skipped() == 0


def test_malformed_workload_line_makes_its_records_unknown(tree):
    wl_path = tree / DEVICE / MATMUL / "database_workload.json"
    wl_path.write_text(wl_path.read_text() + '["123", "%%% not base64"]\n')
    path = record_file(tree, MATMUL)
    line = append(path, json.dumps([1, good_line(tree)[1]]))
    s = read_records([tree]).summary
    assert s.counts["unknown workload"] == 1
    assert s.examples["unknown workload"][0].startswith(f"{path}:{line}: workload line {wl_path}:2 is malformed")


def test_corrupt_xz_keeps_earlier_lines_and_names_the_file(tree):
    packed = tree / DEVICE / CONV / "database_tuning_record.json.xz"
    text = lzma.decompress(packed.read_bytes()).decode()
    big = text * 40  # large enough that a truncated stream still yields whole lines
    data = lzma.compress(big.encode())
    packed.write_bytes(data[: len(data) // 2])
    result = read_records([tree])
    s = result.summary
    assert s.counts["unreadable file"] == 1 and s.examples["unreadable file"][0].startswith(f"{packed}:")
    assert 0 < len(result.tasks[f"{DEVICE}/{CONV}"].records) < 40 * 24


def test_invalid_arguments(tree, tmp_path):
    with pytest.raises(ValueError, match="failed='maybe'"):
        read_records([tree], failed="maybe")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"empty: no database_tuning_record.json"):
        read_records([tmp_path / "empty"])
    with pytest.raises(ValueError, match="nothere: not a folder"):
        read_records([tmp_path / "nothere"])
