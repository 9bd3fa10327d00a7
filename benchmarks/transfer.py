"""Adapting a pretrained PAM to new work with a few hundred records: MoA against finetuning, against
training from scratch on the same records, and against the pretrained model as it is, in one run.

    python benchmarks/transfer.py --shards runs/h100_shards --target-network bert_base --seed 0 1 2 --out runs/transfer/bert_base
    python benchmarks/transfer.py --shards runs/h100_shards --target-shards runs/h200_shards --target-network bert_base \
        --pretrain-on all --seed 0 1 2 --out runs/transfer_h200/bert_base_all   # across GPUs: H100 -> H200
    python benchmarks/transfer.py ... -- --trainer.accelerator gpu --trainer.precision bf16-mixed   # train.py flags
    python benchmarks/transfer.py --target-shards runs/h200_shards_7k --target-network resnet_50 \
        --pretrained runs/quality_26k/resnet_50/pam/version_{0,1,2}/checkpoints/best-*.ckpt --adapt-fraction 0.1 --seed 0 1 2

Per seed:
1. *pretrain*: PAM (`configs/pam.yaml`) on the records of `--shards` (the source: one GPU's), with
   `--pretrain-on others` (default) every task except the target network's (hold-out split,
   whole-task validation), with `--pretrain-on all` every task (a tenth of every task's records
   validate). `all` needs `--target-shards`: on the same shards it would pretrain on the test records.
   `--pretrained CKPT ...` (instead of `--shards`) skips this fit and starts from train.py checkpoints
   (one for every seed, or one per seed in `--seed`'s order), e.g. the hold-out fits of
   benchmarks/quality.py, which are the `others` pretraining; what they were trained on is then the
   caller's to vouch for.
2. The target network's tasks alone, from `--target-shards` (default: `--shards`; another GPU's
   records for cross-GPU transfer), split within each task: `--adapt-fraction` of the records to
   adapt on (a few hundred; a tenth of them validate), the rest to test. On those same splits:
   * `pretrained`: the pretrained PAM, no update (`train.py test`);
   * `scratch`: PAM trained from nothing on the adaptation records;
   * `finetune`: the pretrained PAM trained on (`configs/finetune.yaml`, `--model.init_from`);
   * `moa`: MoA from the pretrained PAM (`configs/moa.yaml`: the online copy trains, a momentum
     copy follows it; Pruner's MoA-Pruner, offline).
Every row is tested on the same records (checked); metrics as in benchmarks/quality.py.
Measured (benchmarks/results/transfer/): across networks on one GPU (`h100_<network>.json`: the
target network held out of H100 pretraining, adapted on its other H100 records) and across GPUs as
the published MoA does (`h100_to_h200_<network>_<others|all>.json`: pretrained on H100 records,
adapted and tested on H200 records of the same sm_90a target).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from jsonargparse import Namespace

sys.path.insert(0, str(Path(__file__).resolve().parent))

from quality import REPO, fit_network, reference_datamodule, summarize, test_checkpoint  # noqa: E402

from benchmarks.cli import doc_parser, split_passthrough  # noqa: E402
from data.atomic import atomic_write_text  # noqa: E402

ROWS = ("pretrained", "scratch", "finetune", "moa")
SHOWN = ("test_pairwise_acc", "test_peak@1", "test_peak@5", "test_kendall_tau")
PRETRAIN_ON = ("others", "all")


def pretrain_data(args: Namespace) -> list[str]:
    """train.py data flags of the pretraining on `--shards` (without the seeds)."""
    if args.pretrain_on == "others":  # the target network's tasks go to the (unused) test side
        split = ["--data.split", "hold-out", "--data.test_networks", json.dumps([args.target_network])]
    else:  # every record trains but a tenth of every task's, which validates
        split = ["--data.split", "within-task", "--data.test_fraction", "0", "--data.val_fraction", "0.1"]
    return ["--data.shards", args.shards, *split]


def run_seed(
    args: Namespace, seed: int, extra: list[str], checkpoint: str | None = None
) -> tuple[dict[str, dict], dict]:
    """Every row for one seed (splits, initialization); `extra`: train.py flags for every fit and test;
    `checkpoint`: the pretrained PAM to start from instead of pretraining."""
    seeds = ["--data.seed", str(seed), "--seed_everything", str(seed)]
    out = Path(args.out) / f"seed{seed}"
    pre: dict = {}
    start = time.perf_counter()
    if checkpoint is None:
        source = [*pretrain_data(args), *seeds]
        dm = reference_datamodule(REPO / "configs" / "pam.yaml", source, extra)
        pretrained, note = fit_network("pam", source, out / "pretrain", args.epochs, extra, dm)
        pre = {
            "pretrain_train_records": int(len(dm.splits["train"])),
            "pretrain_val_records": int(len(dm.splits["val"])),
        }
    else:
        pretrained, note = checkpoint, f"given {checkpoint}"
    rows: dict[str, dict] = {}
    pre_s = time.perf_counter() - start

    test_fraction = 1.0 - args.adapt_fraction  # the DataModule carves validation from the rest
    target = ["--data.shards", args.target_shards, "--data.networks", json.dumps([args.target_network]),
              "--data.split", "within-task", "--data.test_fraction", str(test_fraction), "--data.val_fraction", "0.1",
              *seeds]  # fmt: skip
    tdm = reference_datamodule(REPO / "configs" / "pam.yaml", target, extra)
    sizes = {name: int(len(idx)) for name, idx in tdm.splits.items()}
    rows["pretrained"] = {
        **test_checkpoint("pam", target, pretrained, extra),
        "train_s": pre_s,
        "note": f"pretrain: {note}",
    }
    for row, config, init in (
        ("scratch", "pam", []),
        ("finetune", "finetune", ["--model.init_from", pretrained]),
        ("moa", "moa", ["--model.init_from", pretrained]),
    ):
        start = time.perf_counter()
        ckpt, note = fit_network(config, target, out / row, args.epochs, [*extra, *init], tdm)
        train_s = time.perf_counter() - start
        rows[row] = {**test_checkpoint(config, target, ckpt, [*extra, *init]), "train_s": train_s, "note": note}
    return rows, {**pre, **sizes}


def main(argv: list[str] | None = None) -> dict:
    p = doc_parser(__doc__)
    p.add_argument(
        "--shards",
        default=None,
        help="feature shards pretrained on (several networks; the source GPU); not with --pretrained",
    )
    p.add_argument(
        "--target-shards",
        default=None,
        help="shards of the target network's adaptation and test records (default: --shards)",
    )
    p.add_argument("--target-network", required=True, help="the network adapted to")
    p.add_argument(
        "--pretrain-on",
        choices=PRETRAIN_ON,
        default="others",
        help="pretrain on the other networks' tasks of --shards (the target's held out) or on all of them",
    )
    p.add_argument(
        "--adapt-fraction", type=float, default=0.4, help="share of its records adapted on (incl. validation)"
    )
    p.add_argument("--epochs", type=int | None, default=None, help="max epochs of every fit (default: each config's)")
    p.add_argument(
        "--pretrained",
        nargs="+",
        default=None,
        help="train.py checkpoints to adapt instead of pretraining (one, or one a seed)",
    )
    p.add_argument("--seed", type=int, nargs="+", default=[0])
    p.add_argument("--out", default="runs/transfer")
    ours, extra = split_passthrough(argv)  # train.py flags after `--`, for every fit and test
    args = p.parse_args(ours)
    if not 0.0 < args.adapt_fraction < 1.0:
        p.error(f"--adapt-fraction {args.adapt_fraction} must be in (0, 1): the rest of the records test")
    if (args.shards is None) == (args.pretrained is None):
        p.error("give --shards to pretrain on, or --pretrained checkpoints (with --target-shards), not both")
    args.target_shards = args.target_shards or args.shards
    if args.target_shards is None:
        p.error("--pretrained needs --target-shards: the records to adapt and test on")
    if args.shards and args.pretrain_on == "all" and Path(args.target_shards).resolve() == Path(args.shards).resolve():
        p.error("--pretrain-on all with the target network's records in --shards would pretrain on its test records: "
                "pass --target-shards (other records, e.g. another GPU's), or keep --pretrain-on others")  # fmt: skip
    given = args.pretrained or [None]
    if len(given) not in (1, len(args.seed)):
        p.error(f"--pretrained: {len(given)} checkpoints for {len(args.seed)} seeds (give one, or one a seed)")
    for ckpt in args.pretrained or []:
        if not Path(ckpt).is_file():
            p.error(f"--pretrained {ckpt}: no such file")
    per_seed, sizes = {}, {}
    for i, seed in enumerate(args.seed):
        per_seed[seed], sizes[seed] = run_seed(args, seed, extra, given[i % len(given)])
    summary = summarize(per_seed)
    result = {"target_network": args.target_network, "shards": args.shards, "target_shards": args.target_shards,
              "pretrain_on": args.pretrain_on if args.shards else None, "pretrained": args.pretrained, "adapt_fraction": args.adapt_fraction,
              "seeds": args.seed,
              "sizes": sizes, "results": summary, "per_seed": per_seed}  # fmt: skip
    Path(args.out).mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(args.out) / "results.json", json.dumps(result, indent=1) + "\n")
    first = sizes[args.seed[0]]
    which = "the other networks'" if args.pretrain_on == "others" else "all"
    source = (f"{first['pretrain_train_records']} of {which} records of {args.shards}" if "pretrain_train_records" in first
              else " ".join(args.pretrained))  # fmt: skip
    print(f"\n{args.target_network}: pretrained on {source}; "
          f"adapted on {first['train']}, validated on {first['val']}, tested on {first['test']} of {args.target_shards} "
          f"(seed {args.seed[0]})")  # fmt: skip
    print("| row | " + " | ".join(k.removeprefix("test_") for k in SHOWN) + " | train s |")
    print("|---|" + "---|" * (len(SHOWN) + 1))
    for row in ROWS:
        r = summary[row]
        cells = [f"{r[k]:.3f}" + (f" ± {r[k + '_std']:.3f}" if k + "_std" in r else "") for k in SHOWN]
        print(f"| {row} | " + " | ".join(cells) + f" | {r['train_s']:.1f} |")
    return result


if __name__ == "__main__":
    # Our flags are not train.py's: hide them from LightningCLI's sys.argv check (it warns otherwise).
    argv, sys.argv[1:] = sys.argv[1:], []
    main(argv)
