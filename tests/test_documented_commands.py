"""The command lines of README.md and docs/*.md parse with the current command-line interfaces.

Users copy these commands, and the ones beside measured numbers say how the numbers were made: when
a script renames or drops a flag, its documented commands must change with it. Every
`python[3] benchmarks/<script>.py ...`, `python tune.py ...`, `python train.py ...` and
`python -m data.<module> | bridge.<module> ...` in a code block (lines joined at a trailing `\\`) or
in an inline code span (which may wrap lines) is parsed by that script's own parser, and nothing
else runs: jsonargparse's `ArgumentParser.parse_args` is wrapped so that its outermost call stops
the script with the namespace, before any work (tune.py: its `_parse`, which also checks the
--network / --workload pair). A bare name (`python -m data.merge`, no arguments) is a mention, not a
command line. Commands whose placeholders cannot parse are listed in SKIP, which fails when an entry
stops matching or starts parsing.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import io
import re
import shlex
import sys
from pathlib import Path

import jsonargparse
import pytest
from benchmark_files import REPO, load_benchmark

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# `python` + the script: benchmarks/<x>.py, tune.py, train.py, or -m data.<x> / bridge.<x>
COMMAND = re.compile(
    r"(?:^|(?<=[\s`(]))python3?\s+"
    r"(?:-m\s+(?:data|bridge)\.\w+|benchmarks/[\w/]+\.py|tune\.py|train\.py)"
    r"(?=[\s`]|$)"
)

# (doc, start of the command): commands whose placeholders do not parse, and why they stay
SKIP = {
    ("README.md", "python train.py fit --config pam ..."): "make demo's steps, abridged (the Makefile has them whole)",
    ("README.md", "python train.py test ..."): "make demo's steps, abridged",
    ("README.md", "python tune.py --workload conv2d:1,14,14,64,384,1,1,0"): "make demo's steps, abridged",
    ("benchmarks.md", "python -m data.collect --target nvidia/nvidia-h100 --network ... --max-tasks M"): (
        "collect.sh's collector, its settings named by the script's variables"
    ),
    ("benchmarks.md", "python -m data.collect ... --plan-only"): "the planning step, its networks elided",
    ("training.md", "python train.py fit ... --trainer.devices 8"): "srun's form of the torchrun command above",
    ("training.md", "python train.py ..."): "any train.py command, on one thread",
}


def code_segments(text: str) -> list[tuple[int, str]]:
    """(line, text) of each code line (fenced or indented; a trailing backslash joins the next line)
    and of each inline code span (newlines as spaces), in the markdown `text`."""
    lines = text.splitlines()
    code, prose, fenced = [], [], False
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            prose.append("")
        elif fenced or line.startswith("    "):
            code.append((number, line))
            prose.append("")
        else:
            prose.append(line)
    segments, i = [], 0
    while i < len(code):
        number, line = code[i]
        while line.rstrip().endswith("\\") and i + 1 < len(code):
            i += 1
            follow = code[i][1].strip()
            line = line.rstrip()[:-1] + " " + (follow[1:] if follow.startswith("#") else follow)
        segments.append((number, line))
        i += 1
    text = "\n".join(prose)
    for span in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text):
        segments.append((text.count("\n", 0, span.start()) + 1, span.group(1).replace("\n", " ")))
    return segments


def split_command(command: str) -> list[str]:
    """The words of a shell command up to its end: a comment, `&&`, `|`, `;` or a redirection."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words = []
    for word in lexer:
        if set(word) <= set("();<>|&"):
            break
        words.append(word)
    return words


def documented_commands(text: str) -> list[tuple[int, list[str]]]:
    """(line, words) of each command of the markdown `text`."""
    found = []
    for number, segment in code_segments(text):
        for match in COMMAND.finditer(segment):
            found.append((number, split_command(segment[match.start() :].split("`")[0])))
    return found


class _Parsed(BaseException):
    """Raised by the wrapped parse_args once the outermost parse is through (not an Exception, so no
    `except Exception` of a script swallows it)."""


@functools.cache
def _module(script: str):
    if script.startswith("benchmarks/"):
        return load_benchmark(Path(script).relative_to("benchmarks").with_suffix("").as_posix())
    return importlib.import_module(script.removesuffix(".py"))


def parse_error(words: list[str]) -> str | None:
    """None when the arguments of the command `words` parse with the script's parser; else why not."""
    script = _script(words)
    args = words[words.index(script) + 1 :]
    bracketed = [a for a in args if a.startswith("[-")]
    if bracketed:
        return f"optional flags in brackets are not a command line: {bracketed}"
    module = _module(script)
    err = io.StringIO()
    original = jsonargparse.ArgumentParser.parse_args
    depth = 0

    def parse_only(self, *a, **k):
        nonlocal depth
        depth += 1
        try:
            namespace = original(self, *a, **k)
        finally:
            depth -= 1
        if depth == 0:
            raise _Parsed(namespace)
        return namespace

    argv = sys.argv
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            if script == "tune.py":
                module._parse(args)  # parse only, plus the --network / --workload check
                return None
            jsonargparse.ArgumentParser.parse_args = parse_only
            if inspect.signature(module.main).parameters:
                sys.argv = [script]
                module.main(args)
            else:  # a main() that reads sys.argv
                sys.argv = [script, *args]
                module.main()
    except _Parsed:
        return None
    except SystemExit as exit_:
        if exit_.code in (0, None):  # --help
            return None
        lines = err.getvalue().strip().splitlines()  # usage, then "error: ..." (may span lines)
        first = next((i for i, line in enumerate(lines) if line.startswith("error:")), len(lines) - 1)
        return "\n".join(lines[first:]) or f"exit {exit_.code}"
    finally:
        jsonargparse.ArgumentParser.parse_args = original
        sys.argv = argv
    return f"{script}: main() returned without parsing its arguments"


def _skip_reason(doc: str, words: list[str]) -> str | None:
    text = shlex.join(words)
    return next((why for (d, start), why in SKIP.items() if d == doc and text.startswith(start)), None)


def _script(words: list[str]) -> str:
    return words[2] if words[1] == "-m" else words[1]


CASES = [
    pytest.param(path.name, words, id=f"{path.name}:{line}:{_script(words)}")
    for path in DOCS
    for line, words in documented_commands(path.read_text())
    if len(words) > 2 + (words[1] == "-m")  # a bare name is a mention
]


def test_the_docs_have_commands():
    assert len(CASES) > 60
    scripts = {_script(words) for _, words in (c.values for c in CASES)}
    assert {"train.py", "tune.py", "data.collect", "bridge.export", "benchmarks/tuning.py"} <= scripts


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_command_is_in_code_the_extractor_reads(path):
    """An unbalanced backtick or an unusual block would hide commands from this test: every
    `python ...` of the file must be in a code line or an inline span that the extractor reads."""
    text = path.read_text()
    assert len(COMMAND.findall(text)) == sum(len(COMMAND.findall(s)) for _, s in code_segments(text))


@pytest.mark.parametrize(("doc", "words"), CASES)
def test_documented_command_parses(doc, words):
    why = _skip_reason(doc, words)
    if why is not None:
        assert parse_error(words) is not None, f"parses now: drop it from SKIP ({shlex.join(words)})"
        pytest.skip(why)
    error = parse_error(words)
    assert error is None, f"{shlex.join(words)}\n{error}"


@pytest.mark.parametrize(("doc", "start"), list(SKIP))
def test_skip_entries_match_a_command(doc, start):
    assert any(d == doc and shlex.join(w).startswith(start) for d, w in (c.values for c in CASES)), (doc, start)


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        # the documented lines before the flags changed: the check must reject them
        (
            """python benchmarks/tuning.py --target '{"kind": "llvm"}' --psa a100 --trials 24 --epochs 20 --deadline 480 --out /tmp/t""",
            "--deadline",  # (--epochs is a flag again since 2026-11-28)
        ),
        (
            "python3 benchmarks/tuning.py --psa h100 --checkpoint runs/pam_h100.pt --trials 150 --deadline 433",
            "--deadline",
        ),
        (
            """python benchmarks/collect_speed.py --target '{"kind": "llvm"}' --op conv2d:1,56,56,64,64,3,1,1 --n 16""",
            "--op",
        ),
        ("python tune.py --target nvidia/nvidia-h100 --out runs/t", "--network"),  # tune.py's own check
        ("python -m data.merge a b --dry-run maybe", "dry_run"),  # a flag's value must still be a bool
        ("python benchmarks/extract_speed.py --network resnet_18 [--workers 2]", "brackets"),
    ],
)
def test_retired_flags_fail(command, flag):
    error = parse_error(split_command(command))
    assert error is not None and flag in error, error


def test_extraction_of_markdown_forms():
    doc = (
        "Run `python tune.py --workload\nmatmul:64,64,64 --target llvm` and `python -m data.merge`.\n\n"
        "```bash\nOMP_NUM_THREADS=1 python train.py fit --config pam \\\n    --data.shards D  # comment\n```\n\n"
        "    # = python benchmarks/tuning.py --report \\\n    #     --results R && echo done\n"
    )
    assert documented_commands(doc) == [
        (5, ["python", "train.py", "fit", "--config", "pam", "--data.shards", "D"]),
        (9, ["python", "benchmarks/tuning.py", "--report", "--results", "R"]),
        (1, ["python", "tune.py", "--workload", "matmul:64,64,64", "--target", "llvm"]),
        (2, ["python", "-m", "data.merge"]),
    ]
