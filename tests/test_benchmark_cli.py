"""benchmarks/cli.py: the docstring printed as written in --help, and argv cut at `--` (quality.py and
transfer.py pass the rest through to train.py)."""

import pytest
from benchmark_files import load_benchmark

cli = load_benchmark("cli")
doc_parser, split_passthrough = cli.doc_parser, cli.split_passthrough

DOC = """One line.

    python benchmarks/x.py --a 1
    python benchmarks/x.py --a 2 -- --trainer.max_epochs 1
"""


def test_help_keeps_the_docstring_lines(capsys):
    parser = doc_parser(DOC)
    parser.add_argument("--a", type=int, default=0, help="a number")
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    assert DOC in capsys.readouterr().out
    assert parser.parse_args(["--a", "2"]).a == 2


@pytest.mark.parametrize(
    ("argv", "ours", "rest"),
    [
        (["--a", "1"], ["--a", "1"], []),
        (["--a", "1", "--", "--trainer.max_epochs", "1"], ["--a", "1"], ["--trainer.max_epochs", "1"]),
        (["--", "--x", "--", "--y"], [], ["--x", "--y"]),
        (["--a", "1", "--"], ["--a", "1"], []),
    ],
)
def test_split_passthrough(argv, ours, rest):
    assert split_passthrough(argv) == (ours, rest)


def test_split_passthrough_reads_sys_argv(monkeypatch):
    monkeypatch.setattr("sys.argv", ["quality.py", "--shards", "s", "--", "--data.batch_size", "64"])
    assert split_passthrough(None) == (["--shards", "s"], ["--data.batch_size", "64"])
