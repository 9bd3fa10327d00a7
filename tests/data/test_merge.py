"""data.merge: a collected tree joins another without losing or duplicating a record (real files,
read back by MetaSchedule's own JSONDatabase)."""

import json
import lzma
import shutil
from pathlib import Path

import pytest

from data.merge import main, merge_device
from tvm_env import ms

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tiny_records" / "llvm-sapphirerapids-2c"
MATMUL, CONV = "matmul_e87e4aed", "conv2d_nhwc_e7d8f54e"


def _lines(path: Path) -> list[str]:
    text = lzma.open(path, "rt").read() if path.suffix == ".xz" else path.read_text()
    return [line for line in text.splitlines() if line.strip()]


def _trees(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """dst: matmul's records 0-15 only; src: matmul's records 8-23 (8 shared) and the conv2d task."""
    records = _lines(FIXTURE / MATMUL / "database_tuning_record.json")
    index = json.loads((FIXTURE / "index.json").read_text())
    dst, src = tmp_path / "dst" / FIXTURE.name, tmp_path / "src" / FIXTURE.name
    shutil.copytree(FIXTURE / MATMUL, dst / MATMUL)
    (dst / MATMUL / "database_tuning_record.json").write_text("\n".join(records[:16]) + "\n")
    (dst / "index.json").write_text(json.dumps({**index, "tasks": {MATMUL: index["tasks"][MATMUL]}}))
    shutil.copytree(FIXTURE / MATMUL, src / MATMUL)
    shutil.copytree(FIXTURE / CONV, src / CONV)
    (src / MATMUL / "database_tuning_record.json").write_text("\n".join(records[8:]) + "\n")
    src_index = {**index, "networks": {"net_b": [[CONV, 2]]}, "collections": [{"date": "2026-11-25", "records": 24}]}
    (src / "index.json").write_text(json.dumps(src_index))
    return src, dst, records


def _database(folder: Path) -> ms.database.JSONDatabase:
    return ms.database.JSONDatabase(
        path_workload=str(folder / "database_workload.json"),
        path_tuning_record=str(folder / "database_tuning_record.json"),
        allow_missing=False,
    )


def test_merge_tops_up_adds_tasks_and_is_idempotent(tmp_path):
    src, dst, records = _trees(tmp_path)
    conv_records = _lines(FIXTURE / CONV / "database_tuning_record.json.xz")

    result = merge_device(src, dst)
    assert (result.added, result.duplicates) == (8 + len(conv_records), 8)
    assert result.new_tasks == [CONV] and result.topped_up == [MATMUL]

    merged = _lines(dst / MATMUL / "database_tuning_record.json")
    assert sorted(merged) == sorted(records), "every matmul record once, none lost"
    # the new task is stored as the destination's tasks are (plain JSON here)
    assert not (dst / CONV / "database_tuning_record.json.xz").exists()
    assert len(_lines(dst / CONV / "database_tuning_record.json")) == len(conv_records)
    # MetaSchedule's own database reads the merged folders
    assert len(_database(dst / MATMUL).get_all_tuning_records()) == len(records)
    assert len(_database(dst / CONV).get_all_tuning_records()) == len(conv_records)
    index = json.loads((dst / "index.json").read_text())
    assert set(index["tasks"]) == {MATMUL, CONV}
    assert index["networks"] == {"net_b": [[CONV, 2]]}
    assert index["collections"] == [{"date": "2026-11-25", "records": 24}]

    again = merge_device(src, dst)
    assert (again.added, again.duplicates) == (0, 8 + 8 + len(conv_records))
    assert sorted(_lines(dst / MATMUL / "database_tuning_record.json")) == sorted(records)
    assert json.loads((dst / "index.json").read_text())["collections"] == index["collections"]


def test_merge_matches_tasks_by_workload_hash_not_folder_name(tmp_path):
    src, dst, records = _trees(tmp_path)
    (src / MATMUL).rename(src / "matmul_renamed_00000000")
    assert main([str(src.parent), str(dst.parent)]) == 0
    assert not (dst / "matmul_renamed_00000000").exists()
    assert sorted(_lines(dst / MATMUL / "database_tuning_record.json")) == sorted(records)


def test_merge_names_a_malformed_line_and_writes_nothing(tmp_path, capsys):
    src, dst, _ = _trees(tmp_path)
    bad = src / MATMUL / "database_tuning_record.json"
    lines = bad.read_text().splitlines()
    lines[3] = '[0, ["trace"'
    bad.write_text("\n".join(lines) + "\n")
    before = {p: p.read_bytes() for p in dst.rglob("*") if p.is_file()}
    assert main([str(src), str(dst.parent)]) == 2
    assert f"{bad}:4: malformed database line" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in dst.rglob("*") if p.is_file()} == before


def test_merge_refuses_another_target(tmp_path):
    src, dst, _ = _trees(tmp_path)
    index = json.loads((src / "index.json").read_text())
    index["target"] = {**index["target"], "mcpu": "znver3"}
    (src / "index.json").write_text(json.dumps(index))
    try:
        merge_device(src, dst)
    except ValueError as err:
        assert "different targets" in str(err)
    else:
        raise AssertionError("merging another target's records must fail")


def test_merge_refuses_another_gpu_model_of_the_same_target(tmp_path, capsys):
    """An H200 collects for the H100's sm_90a target; its records must not join an H100 tree."""
    src, dst, _ = _trees(tmp_path)
    for folder, gpu in ((src, "NVIDIA H200"), (dst, "NVIDIA H100 80GB HBM3")):
        index = json.loads((folder / "index.json").read_text())
        index["collections"] = [{"date": "2026-11-25", "records": 8, "gpus": [{"index": "0", "name": gpu}]}]
        (folder / "index.json").write_text(json.dumps(index))
    before = (dst / MATMUL / "database_tuning_record.json").read_text()
    assert main([str(src.parent), str(dst.parent)]) == 2
    err = capsys.readouterr().err
    assert "measured on NVIDIA H200" in err and "on NVIDIA H100 80GB HBM3" in err
    assert (dst / MATMUL / "database_tuning_record.json").read_text() == before
    assert not (dst / CONV).exists()


@pytest.mark.parametrize("flag", [["--dry-run"], ["--dry-run", "true"]], ids=["bare", "valued"])
def test_dry_run_counts_and_writes_nothing(tmp_path, capsys, flag):
    src, dst, _ = _trees(tmp_path)
    before = {p: p.read_bytes() for p in dst.rglob("*") if p.is_file()}
    assert main([str(src), str(dst.parent), *flag]) == 0
    assert "8 already stored" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in dst.rglob("*") if p.is_file()} == before


def test_a_folder_name_taken_by_another_workload_is_refused(tmp_path):
    src, dst, _ = _trees(tmp_path)
    # dst holds a folder named like src's conv2d task, but with matmul's workload
    shutil.copytree(dst / MATMUL, dst / CONV)
    shutil.rmtree(dst / MATMUL)
    before = {p: p.read_bytes() for p in dst.rglob("*") if p.is_file()}
    try:
        merge_device(src, dst)
    except ValueError as err:
        assert f"{dst / CONV}: exists with another workload" in str(err)
        assert {p: p.read_bytes() for p in dst.rglob("*") if p.is_file()} == before
    else:
        raise AssertionError("a folder name clash must not merge records into the wrong task")
