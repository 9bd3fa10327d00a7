"""The wheel works outside the checkout: `pip wheel .`, installed into a fresh venv, runs
`pruner-tune --psa h100` (the packaged PSA device table) and `pruner-train --config` (the packaged
training configs) from a temporary folder, with nothing of the checkout on the path.

The venv reuses this interpreter's installed dependencies (a .pth line to its site-packages; a venv
made from a venv does not see them through --system-site-packages) and installs the wheel with
--no-deps --no-index, so the test is offline and quick.
"""

import csv
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from data.synthetic import write_synthetic_shards

REPO = Path(__file__).resolve().parents[1]
TARGET = '{"kind": "llvm", "mcpu": "native", "num-cores": 2}'
SKIP = (".git", ".venv", "runs", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".ruff_cache")
NOT_IN_THE_WHEEL = ("benchmarks", "tests", "docs")  # setup.cfg's packages and modules are none of these: not copied

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """bin/ of a fresh venv with only the wheel installed (plus this interpreter's dependencies)."""
    root = tmp_path_factory.mktemp("wheel")
    shutil.copytree(
        REPO, root / "src", ignore=shutil.ignore_patterns(*SKIP, *NOT_IN_THE_WHEEL)
    )  # builds leave files behind
    pip = [sys.executable, "-m", "pip"]
    subprocess.run(
        [*pip, "wheel", str(root / "src"), "--no-deps", "--no-build-isolation", "-q", "-w", str(root / "dist")],
        check=True,
    )
    (wheel,) = (root / "dist").glob("pruner_lightning-*.whl")
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(root / "venv")], check=True
    )
    python = root / "venv" / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    outer = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site) / "_dependencies.pth").write_text("".join(f"{p}\n" for p in sorted(outer)))
    subprocess.run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)], check=True)
    return root / "venv" / "bin"


def _run(command: list, cwd: Path) -> subprocess.CompletedProcess:
    """`command` in `cwd` without the checkout on PYTHONPATH; it must exit 0."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(TVM_NUM_THREADS="2", OMP_NUM_THREADS="1", WANDB_MODE="offline")
    proc = subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


IN_THE_VENV = """
import runpy, sys, bridge.psa, pruner_lightning, train, tune
print(bridge.psa.DEVICES_FILE, pruner_lightning.__file__, train.__file__, tune.__file__)
script = sys.argv[1]
for args in (sys.argv[2:], ["fit", "--config", "mlp", "--print_config"]):
    print("==== pruner-train", *args, flush=True)
    sys.argv = [script, *args]
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as end:
        if end.code not in (None, 0):
            raise
"""
"""The venv's python: where it imports the packages from (first line), then the installed
`pruner-train` script run as a program (runpy) twice, each run's output after a `==== pruner-train
ARGS` line: with the arguments after the script's path, and `fit --config mlp --print_config`."""


@pytest.fixture(scope="module")
def installed(venv, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """One process of the venv's python in a folder outside the checkout (one process start, one
    import of torch and TVM, for three checks): `IN_THE_VENV` with `pruner-train fit` of PAM as the
    README spells it, on synthetic shards in that folder. The folder, and what it printed: under
    "import" the import paths, under "fit" and "print_config" each pruner-train run's output."""
    here = tmp_path_factory.mktemp("installed")
    write_synthetic_shards(here / "shards", num_shards=1, num_tasks=4, records_per_task=24)
    tiny = ["--model.init_args.net.stmt_hidden", "16", "--model.init_args.net.fuse_hidden", "16"]
    tiny += ["--model.init_args.net.gemm_embed", "8", "--model.init_args.net.heads", "2"]
    quiet = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
    # the README's spelling, from a folder that has no configs/ in it
    fit = ["fit", "--config", "configs/pam.yaml", "--data.shards", "shards", "--trainer.max_epochs", "1", *tiny, *quiet]
    out = _run([venv / "python", "-c", IN_THE_VENV, venv / "pruner-train", *fit], here).stdout
    imported, fitted, printed = out.split("==== pruner-train ")
    assert fitted.startswith(" ".join(fit)) and printed.startswith("fit --config mlp --print_config"), out[-3000:]
    return here, {"import": imported, "fit": fitted, "print_config": printed}


def test_the_installed_packages_come_from_the_wheel(venv, installed):
    files = installed[1]["import"].split()
    assert len(files) == 4 and all(f.startswith(str(venv.parent)) for f in files), files
    assert Path(files[0]).is_file()


def test_tune_with_psa_h100_from_the_wheel(venv, tmp_path):
    args = ["--workload", "matmul:32,32,32", "--target", TARGET, "--cost-model", "random", "--psa", "h100"]
    args += ["--trials", "2", "--trials-per-round", "2", "--population", "16", "--potential", "4", "--work-dir", "w"]
    args += ["--workers", "1"]  # one build worker process (a TVM import) builds the 2 trials
    out = _run([venv / "pruner-tune", *args, "--number", "1", "--min-repeat-ms", "1"], tmp_path).stdout
    assert "draft-then-verify with PSA(h100, traffic-occupancy)" in out and "estimated total latency" in out
    assert json.loads((tmp_path / "w" / "summary.json").read_text())["psa_formula"] == "traffic-occupancy"
    rows = list(csv.DictReader(open(tmp_path / "w" / "tuning_curve.csv")))
    assert rows and float(rows[0]["draft_scored"]) > 0  # PSA (with the h100 row) drafted the batch


def test_train_with_the_packaged_configs_from_the_wheel(installed):
    here, printed = installed
    assert "best val_pairwise_acc:" in printed["fit"]
    assert "PAMModule" in (here / "runs" / "pam" / "version_0" / "config.yaml").read_text()
    assert "pruner_models.module.MLPModule" in printed["print_config"]  # the packaged config, by its name
