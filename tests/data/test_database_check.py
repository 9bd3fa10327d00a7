"""data.database_check: which lines of a MetaSchedule JSON database load, by file and line (no TVM load)."""

from data.database_check import check, has_blank_line


def test_empty_and_blank_lines_are_found_but_not_the_final_newline(tmp_path):
    path = tmp_path / "db.json"
    for text, blank in [
        ("", False),
        ("[1]\n", False),
        ("[1]\n[2]", False),
        ("[1]\n\n", True),
        ("\n[1]\n", True),
        ("[1]\n  \t\n[2]\n", True),
        ("[1]\r\n\r\n[2]\r\n", True),
    ]:
        path.write_bytes(text.encode())
        assert has_blank_line(path) == blank, repr(text)
    assert not has_blank_line(tmp_path / "missing.json")


def test_each_bad_line_is_named_and_records_are_renumbered_past_a_dropped_workload(tmp_path):
    """A workload line that does not load is dropped; the records of the workloads after it are
    renumbered, and its own records go with it (checked without TVM's load: every line fails early)."""
    workloads, records = tmp_path / "w.json", tmp_path / "r.json"
    workloads.write_text("not json\n\n")
    records.write_text('[0, {}]\n[3, {}]\n{"torn"\n')
    checked = check(workloads, records)
    assert checked.workloads == [] and checked.records == []
    assert checked.problems == [
        f"{workloads}:1: unreadable workload (JSONDecodeError: Expecting value: line 1 column 1 (char 0))",
        f"{workloads}:2: empty line",
        f"{records}:1: unreadable tuning record (ValueError: workload index 0 names no readable workload)",
        f"{records}:2: unreadable tuning record (ValueError: workload index 3 names no readable workload)",
        f"{records}:3: unreadable tuning record (JSONDecodeError: Expecting ':' delimiter: line 1 column 8 (char 7))",
    ]
