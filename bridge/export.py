"""Export a trained checkpoint to a self-contained cost-model artifact, and load artifacts.

A Lightning checkpoint (.ckpt from train.py) needs the LightningModule class and Lightning itself to
be read back. An artifact is a plain `torch.save` dict that a tuning machine loads with `torch.load`
and our `nn.Module` classes only (no Lightning, no Trainer, no data):

| key | content |
|---|---|
| format, format_version | "pruner-lightning-artifact", `FORMAT_VERSION` |
| net_class, config, net_kwargs, state_dict | the network state (`pruner_models.registry.net_state`) |
| stmt_scale, access_scale | the normalization vectors (174,) and (23,) (ones for the MLP) |
| schema_version | `data.schema.MODEL_SCHEMA_VERSION` of the features the model was trained on |
| source_device | the device whose measurements trained it, e.g. "cuda-sm_90a" |
| checkpoint | the path it was exported from |

Loading refuses an artifact of another feature-schema version, and names the file in every error
(missing, unreadable, not an artifact, inconsistent weights). Export and loading refuse non-finite
weights or scales, naming the tensor; export refuses to write over its own input. CLI (jsonargparse:
config files, `--print_config`): `python -m bridge.export CKPT --out ARTIFACT [--device NAME]`.

`source_device` starts with the device kind ("cuda", "llvm", ...; `device_kind`). The tuning run warns
loudly when an artifact of one kind scores candidates of another (bridge/factory.py): transfer across
devices is legitimate (MoA adapts a model from another device), so it is a warning, not a refusal.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from data.atomic import atomic_path
from data.schema import ACCESS_DIM, MODEL_SCHEMA_VERSION, ROW_DIM
from pruner_models import registry
from pruner_models.moa import MoANet

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "Artifact",
    "ArtifactError",
    "device_kind",
    "export_checkpoint",
    "load_artifact",
    "load_model",
    "main",
]

FORMAT = "pruner-lightning-artifact"
FORMAT_VERSION = 1

_DEVICE_KINDS = ("cuda", "llvm", "rocm", "metal", "vulkan", "opencl")


class ArtifactError(ValueError):
    """A checkpoint or artifact that cannot be used; the message names the file."""


@dataclasses.dataclass
class Artifact:
    """A loaded cost model.

    Attributes:
        net: PAMNet, MLPNet or MoANet in eval mode, normalization buffers included.
        net_class: its class name.
        source_device: the device the training measurements came from ("unknown" if not recorded).
        schema_version: feature-schema version the model expects.
        path: the file it was loaded from.
    """

    net: nn.Module
    net_class: str
    source_device: str
    schema_version: int
    path: str


def device_kind(source_device: str) -> str | None:
    """The TVM target kind a source-device name starts with ("cuda-sm_90a" -> "cuda"); None if unknown."""
    head = str(source_device).split("-")[0].lower()
    return head if head in _DEVICE_KINDS else None


def _read(path: str | os.PathLike, what: str) -> dict:
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ArtifactError(f"{what} {path!r} does not exist")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise ArtifactError(f"{path}: cannot read {what} ({type(err).__name__}: {err})") from None
    if not isinstance(data, dict):
        raise ArtifactError(f"{path}: not a {what} (a {type(data).__name__}, expected a dict)")
    return data


def _build(state: Mapping[str, Any], path: str) -> nn.Module:
    try:
        return registry.build_net(state, path)
    except registry.NetStateError as err:
        raise ArtifactError(str(err)) from None


def _scales(net: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """(174,) and (23,) normalization vectors of a net (MoA: its online copy's)."""
    inner = net.online if isinstance(net, MoANet) else net
    access = getattr(inner, "access_scale", torch.ones(ACCESS_DIM))
    return inner.stmt_scale.detach().clone(), access.detach().clone()


def export_checkpoint(
    checkpoint: str | os.PathLike, out: str | os.PathLike, *, device: str | None = None, half: bool = False
) -> Artifact:
    """Write the artifact of a train.py checkpoint to `out` (atomically) and return it loaded.

    Args:
        checkpoint: a .ckpt written by train.py (PAMModule, MLPModule or MoAModule).
        out: the artifact path to write.
        device: the source device name to record (default: the checkpoint's `source_device` entry,
            else "unknown").
        half: store the weights (not the normalization buffers) as float16, half the file; they
            load back into a float32 network.

    Raises:
        ArtifactError: missing or unreadable checkpoint, not a train.py checkpoint, weights that do
            not fit, or a checkpoint of another feature-schema version (all name the file).
    """
    path, out = os.fspath(checkpoint), os.fspath(out)
    if os.path.abspath(out) == os.path.abspath(path) or _same_file(path, out):
        raise ArtifactError(f"--out {out!r} is the input checkpoint; writing it would destroy the checkpoint")
    ckpt = _read(path, "checkpoint")
    module = ckpt.get("cost_model")
    modules = sorted(e.module.split(":")[1] for e in registry.MODELS.values())
    if module not in modules or "state_dict" not in ckpt:
        raise ArtifactError(
            f"{path}: not a train.py checkpoint (cost_model={module!r}, expected one of {modules} and a state_dict)"
        )
    schema = int(ckpt.get("schema_version", MODEL_SCHEMA_VERSION))
    if schema != MODEL_SCHEMA_VERSION:
        raise ArtifactError(
            f"{path}: trained on feature schema {schema}, this code computes schema {MODEL_SCHEMA_VERSION}"
        )
    hparams = ckpt.get("hyper_parameters", {})
    entry = registry.by_module(module, path)
    state = {
        "net_class": entry.net_class,
        "config": dict(hparams.get("net") or {}),
        "net_kwargs": {k: hparams[k] for k in entry.net_kwargs if k in hparams},
        "state_dict": {k[len("net.") :]: v for k, v in ckpt["state_dict"].items() if k.startswith("net.")},
    }
    net = _build(state, path)
    stmt_scale, access_scale = _scales(net)
    saved = registry.net_state(net)
    if half:
        weights = {name for name, _ in net.named_parameters()}
        saved["state_dict"] = {k: v.half() if k in weights else v for k, v in saved["state_dict"].items()}
    artifact = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        **saved,
        "stmt_scale": stmt_scale,
        "access_scale": access_scale,
        "schema_version": schema,
        "source_device": device or str(ckpt.get("source_device", "unknown")),
        "checkpoint": os.path.abspath(path),
    }
    with atomic_path(out) as tmp:
        torch.save(artifact, tmp)
    return load_artifact(out)


def load_artifact(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> Artifact:
    """Load an artifact written by `export_checkpoint` (torch.load + our nn.Module; no Lightning).

    Raises:
        ArtifactError: missing or unreadable file, not an artifact, another format or feature-schema
            version, or weights that do not fit the recorded class and config (all name the file).
    """
    path = os.fspath(path)
    data = _read(path, "artifact")
    if data.get("format") != FORMAT:
        hint = (
            " (a train.py checkpoint: export it with python -m bridge.export)"
            if "state_dict" in data and "cost_model" in data
            else ""
        )
        raise ArtifactError(f"{path}: not a {FORMAT} file{hint}")
    if data.get("format_version") != FORMAT_VERSION:
        raise ArtifactError(
            f"{path}: artifact format version {data.get('format_version')!r}, this code reads {FORMAT_VERSION}"
        )
    if data.get("schema_version") != MODEL_SCHEMA_VERSION:
        raise ArtifactError(
            f"{path}: feature schema version {data.get('schema_version')!r} does not match this code's "
            f"{MODEL_SCHEMA_VERSION}; re-featurize and retrain, or use matching code"
        )
    try:
        registry.check_finite({"stmt_scale": data["stmt_scale"], "access_scale": data["access_scale"]}, path)
    except registry.NetStateError as err:
        raise ArtifactError(str(err)) from None
    net = _build(data, path)
    stmt_scale, access_scale = _scales(net)
    consistent = torch.equal(stmt_scale, data["stmt_scale"]) and torch.equal(access_scale, data["access_scale"])
    if stmt_scale.shape != (ROW_DIM,) or not consistent:
        raise ArtifactError(f"{path}: normalization vectors disagree with the weights' buffers (corrupt artifact)")
    return Artifact(
        net.to(map_location), data["net_class"], str(data["source_device"]), int(data["schema_version"]), path
    )


def load_model(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> Artifact:
    """An artifact, or a train.py checkpoint exported on the fly (nothing is written)."""
    path = os.fspath(path)
    if str(path).endswith(".ckpt"):
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            artifact = export_checkpoint(path, os.path.join(tmp, "model.pt"))
        artifact.path = path
        artifact.net.to(map_location)
        return artifact
    return load_artifact(path, map_location)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def build_parser() -> Any:
    """The jsonargparse parser of `python -m bridge.export` (config files, `--print_config`)."""
    from jsonargparse import ActionConfigFile, ArgumentParser, DefaultHelpFormatter

    parser = ArgumentParser(
        prog="python -m bridge.export", description=__doc__.split("\n\n")[0], formatter_class=DefaultHelpFormatter
    )
    parser.add_argument("--config", action=ActionConfigFile, help="a YAML file with any of these options")
    parser.add_argument("checkpoint", type=str, help="a .ckpt written by train.py")
    parser.add_argument("--out", type=str, required=True, help="artifact path to write (.pt); never the checkpoint")
    parser.add_argument(
        "--device",
        type=str | None,
        default=None,
        help="source device name to record, e.g. cuda-sm_90a (default: the checkpoint's, else 'unknown')",
    )
    parser.add_argument(
        "--half",
        type=bool,
        nargs="?",
        const=True,
        default=False,
        help="store the weights as float16, half the file (--half or --half true)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Export; 0 on success, 2 with an `error:` line on a bad argument or unusable file."""
    args = build_parser().parse_args(argv)
    try:
        artifact = export_checkpoint(args.checkpoint, args.out, device=args.device, half=args.half)
    except ArtifactError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    params = sum(p.numel() for p in artifact.net.parameters())
    print(
        f"wrote {args.out}: {artifact.net_class} ({params} parameters), schema {artifact.schema_version}, "
        f"source device {artifact.source_device}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
