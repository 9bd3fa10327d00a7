"""data.card: the data card's numbers come from the record files, and bad input is named."""

import json
import lzma
import shutil
from pathlib import Path

from data.card import device_card, main

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tiny_records"
DEVICE = "llvm-sapphirerapids-2c"


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(FIXTURE, root)
    dev = root / DEVICE
    # one failed measurement appended to matmul (the format a failed build is stored in)
    db = dev / "matmul_e87e4aed" / "database_tuning_record.json"
    first = json.loads(db.read_text().splitlines()[0])
    first[1][1] = [1e10]
    db.write_text(db.read_text() + json.dumps(first) + "\n")
    # matmul used by two networks, conv2d by one; an empty folder a stopped collection left
    index = json.loads((dev / "index.json").read_text())
    index["networks"] = {
        "net_a": [["matmul_e87e4aed", 2]],
        "net_b": [["matmul_e87e4aed", 1], ["conv2d_nhwc_e7d8f54e", 1]],
    }
    (dev / "index.json").write_text(json.dumps(index))
    (dev / "conv2d_empty_00000000").mkdir()
    (dev / "conv2d_empty_00000000" / "database_tuning_record.json").write_text("")
    return root


def _lines(path: Path) -> list[list]:
    text = lzma.open(path, "rt").read() if path.suffix == ".xz" else path.read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_card_counts_records_valid_and_networks(tmp_path, capsys):
    root = _tree(tmp_path)
    dev = root / DEVICE
    matmul = _lines(dev / "matmul_e87e4aed" / "database_tuning_record.json")
    conv = _lines(dev / "conv2d_nhwc_e7d8f54e" / "database_tuning_record.json.xz")
    valid = lambda rows: sum(min(r[1][1]) < 1e9 for r in rows)  # noqa: E731

    card = device_card(dev)
    by_task = {t["folder"]: t for t in card["tasks"]}
    assert by_task["matmul_e87e4aed"]["records"] == len(matmul)
    assert by_task["matmul_e87e4aed"]["valid"] == valid(matmul) == len(matmul) - 1
    assert by_task["conv2d_nhwc_e7d8f54e"]["valid"] == valid(conv)
    assert by_task["matmul_e87e4aed"]["networks"] == ["net_a", "net_b"]
    assert card["networks"]["net_a"] == {"tasks": 1, "records": len(matmul), "valid": len(matmul) - 1}
    assert card["networks"]["net_b"]["records"] == len(matmul) + len(conv)
    assert card["records"] == len(matmul) + len(conv)
    assert card["empty"] == ["conv2d_empty_00000000"]
    # the fixture's 64^3 matmul and its NHWC 3x3 conv (8x8x16 input, HWIO weights)
    assert by_task["matmul_e87e4aed"]["shapes"] == "64x64, 64x64, 64x64"
    assert by_task["conv2d_nhwc_e7d8f54e"]["shapes"] == "1x8x8x16, 3x3x16x16, 1x8x8x16"

    out = tmp_path / "card.json"
    assert main([str(root), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"{len(matmul) + len(conv)} records" in printed and "| net_a | 1 |" in printed
    assert f"| matmul | 64x64, 64x64, 64x64 | net_a, net_b | {len(matmul)} | {len(matmul) - 1} |" in printed
    assert json.loads(out.read_text())[0]["valid"] == card["valid"]


def test_card_names_a_malformed_record(tmp_path, capsys):
    root = _tree(tmp_path)
    db = root / DEVICE / "matmul_e87e4aed" / "database_tuning_record.json"
    lines = db.read_text().splitlines()
    lines[2] = '[0, ["not a record"'
    db.write_text("\n".join(lines) + "\n")
    assert main([str(root)]) == 2
    assert f"{db}:3: malformed tuning record" in capsys.readouterr().err


def test_card_names_a_record_without_argument_info(tmp_path, capsys):
    root = _tree(tmp_path)
    db = root / DEVICE / "matmul_e87e4aed" / "database_tuning_record.json"
    lines = db.read_text().splitlines()
    first = json.loads(lines[0])
    first[1][3] = [["TENSOR", "float32"]]  # a shape missing
    db.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    assert main([str(root)]) == 2
    assert f"{db}:1: malformed tuning record argument info" in capsys.readouterr().err


def test_a_collection_with_a_source_limit_says_so_on_the_card():
    from data.card import _collection_row

    base = {"date": "2026-11-26T01:00:00+00:00", "records": 90, "runner": "local", "runners": 1, "tvm": "0.27.0"}
    limited = _collection_row({**base, "builder_workers": 16, "max_source_kb": 512, "refused": 7})
    plain = _collection_row({**base, "builder_workers": 16, "max_source_kb": None, "refused": 0})
    assert "local x1, 16 build workers, source over 512 KB refused (7) |" in limited
    assert "local x1, 16 build workers |" in plain and "refused" not in plain
