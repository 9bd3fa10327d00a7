"""benchmarks/gpu/train.sh, the device call that trains the shipped models with train.py, run here on
the CPU (`GPU=` empty, two epochs) on real synthetic HDF5 shards: both fits and their tests run, and
what comes back in train.tar.xz is each run's config, metrics and best checkpoint (no last.ckpt);
an earlier run's folder does not hide the new one; SEEDS adds a run of each model a further seed
beside the first seed's; a tarball over PART_MB comes back in parts (a device call returns no file
over 16 MiB) that join into the whole."""

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from data.synthetic import write_synthetic_shards

REPO = Path(__file__).resolve().parents[1]


def test_train_sh_fits_tests_and_packs_both_models(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("train.py", "data", "pruner_models", "pruner_lightning", "benchmarks"):
        (tree / name).symlink_to(REPO / name)
    (tree / ".devkit/empty").mkdir(parents=True)
    subprocess.run(
        ["tar", "-C", str(tree / ".devkit/empty"), "-cJf", str(tree / ".devkit/pylib.tar.xz"), "."], check=True
    )
    shards = tmp_path / "shards"
    write_synthetic_shards(shards, num_shards=1, num_tasks=4, records_per_task=30)
    out = tmp_path / "out"
    out.mkdir()
    (tree / "runs/gpu_pam/version_0").mkdir(parents=True)  # an earlier, empty run: the newest one is tested
    env = dict(
        os.environ,
        PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        OUT=str(out),
        SHARDS=str(shards),
        GPU="",
        FIT_ARGS="--trainer.max_epochs 2 --data.batch_size 40 --trainer.enable_progress_bar false",
        LIMIT="400",
        SEEDS="1 2",
        PART_MB="1",  # the two checkpoints with their optimizer states exceed 1 MiB compressed: parts
        XZ_OPT="-0",  # tar -J's xz at its fastest preset: the checkpoints' floats hardly compress (-6 took twice the CPU)
    )
    done = subprocess.run(
        ["bash", "benchmarks/gpu/train.sh"], cwd=tree, env=env, capture_output=True, text=True, timeout=400
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for model in ("pam", "mlp", "pam_s2", "mlp_s2"):
        log = (out / f"train_{model}.log").read_text()
        assert f"fit {model} exit 0" in log, log[-2000:]
        assert "test_pairwise_acc" in log, log[-2000:]
    parts = sorted(out.glob("train.tar.xz.part-*"))
    assert len(parts) >= 2 and not (out / "train.tar.xz").exists(), sorted(p.name for p in out.iterdir())
    assert all(p.stat().st_size <= 1 << 20 for p in parts)
    joined = b"".join(p.read_bytes() for p in parts)
    with tarfile.open(fileobj=io.BytesIO(joined), mode="r:xz") as tar:
        names = tar.getnames()
    for model, version in (("pam", 1), ("mlp", 0), ("pam_s2", 0), ("mlp_s2", 0)):
        run = f"gpu_{model}/version_{version}"
        assert f"{run}/config.yaml" in names and f"{run}/metrics.csv" in names
        assert any(n.startswith(f"{run}/checkpoints/best-") for n in names), names
        assert any(n.startswith(f"gpu_{model}_test/") for n in names), names
    assert not any(n.endswith("last.ckpt") for n in names)
    assert not (out / "extra").exists()
