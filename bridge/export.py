"""Export a trained checkpoint to a self-contained cost-model artifact, and load artifacts.

A Lightning checkpoint (.ckpt from train.py) needs the LightningModule class and Lightning itself to
be read back. An artifact is a plain `torch.save` dict that a tuning machine loads with `torch.load`
and our `nn.Module` classes only (no Lightning, no Trainer, no data):

| key | content |
|---|---|
| format, format_version | "pruner-lightning-artifact", `FORMAT_VERSION` |
| net_class | "PAMNet", "MLPNet" or "MoANet" |
| config | the net's layer sizes (the config dataclass as a dict) |
| net_kwargs | other constructor arguments (MoA: momentum) |
| state_dict | weights and the normalization buffers |
| stmt_scale, access_scale | the normalization vectors (174,) and (23,) (ones for the MLP) |
| schema_version | `data.schema.SCHEMA_VERSION` of the features the model was trained on |
| source_device | the device whose measurements trained it, e.g. "cuda-sm_90a" |
| checkpoint | the path it was exported from |

Loading refuses an artifact of another feature-schema version, and names the file in every error
(missing, unreadable, not an artifact, inconsistent weights). CLI:
`python -m bridge.export CKPT --out ARTIFACT [--device NAME]`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from data.atomic import atomic_path
from data.schema import ACCESS_DIM, ROW_DIM, SCHEMA_VERSION
from pruner_models.mlp import MLPConfig, MLPNet
from pruner_models.moa import MoANet
from pruner_models.pam import PAMConfig, PAMNet

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "Artifact",
    "ArtifactError",
    "export_checkpoint",
    "load_artifact",
    "load_model",
    "main",
]

FORMAT = "pruner-lightning-artifact"
FORMAT_VERSION = 1

_NETS: dict[str, tuple[type[nn.Module], type]] = {
    "PAMNet": (PAMNet, PAMConfig),
    "MLPNet": (MLPNet, MLPConfig),
    "MoANet": (MoANet, PAMConfig),
}
"""net_class -> (network class, its config dataclass)."""
_MODULE_NETS = {"PAMModule": "PAMNet", "MLPModule": "MLPNet", "MoAModule": "MoANet"}
"""LightningModule name stored in a train.py checkpoint -> the network it wraps."""


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


def _build(
    net_class: str,
    config: Mapping[str, Any],
    net_kwargs: Mapping[str, Any],
    state: Mapping[str, torch.Tensor],
    path: str,
) -> nn.Module:
    if net_class not in _NETS:
        raise ArtifactError(f"{path}: unknown net_class {net_class!r}; expected one of {sorted(_NETS)}")
    cls, config_cls = _NETS[net_class]
    try:
        net = cls(config_cls(**config), **net_kwargs)
        net.load_state_dict(state)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ArtifactError(f"{path}: the weights do not fit {net_class}({dict(config)}): {err}") from None
    return net.eval()


def _scales(net: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """(174,) and (23,) normalization vectors of a net (MoA: its online copy's)."""
    inner = net.online if isinstance(net, MoANet) else net
    access = getattr(inner, "access_scale", torch.ones(ACCESS_DIM))
    return inner.stmt_scale.detach().clone(), access.detach().clone()


def export_checkpoint(checkpoint: str | os.PathLike, out: str | os.PathLike, *, device: str | None = None) -> Artifact:
    """Write the artifact of a train.py checkpoint to `out` (atomically) and return it loaded.

    Args:
        checkpoint: a .ckpt written by train.py (PAMModule, MLPModule or MoAModule).
        out: the artifact path to write.
        device: the source device name to record (default: the checkpoint's `source_device` entry,
            else "unknown").

    Raises:
        ArtifactError: missing or unreadable checkpoint, not a train.py checkpoint, weights that do
            not fit, or a checkpoint of another feature-schema version (all name the file).
    """
    path = os.fspath(checkpoint)
    ckpt = _read(path, "checkpoint")
    module = ckpt.get("cost_model")
    if module not in _MODULE_NETS or "state_dict" not in ckpt:
        raise ArtifactError(
            f"{path}: not a train.py checkpoint (cost_model={module!r}, expected one of {sorted(_MODULE_NETS)} and a state_dict)"
        )
    schema = int(ckpt.get("schema_version", SCHEMA_VERSION))
    if schema != SCHEMA_VERSION:
        raise ArtifactError(f"{path}: trained on feature schema {schema}, this code computes schema {SCHEMA_VERSION}")
    hparams = ckpt.get("hyper_parameters", {})
    net_class = _MODULE_NETS[module]
    config = dict(hparams.get("net") or {})
    net_kwargs = {"momentum": float(hparams.get("momentum", 0.99))} if net_class == "MoANet" else {}
    state = {k[len("net.") :]: v for k, v in ckpt["state_dict"].items() if k.startswith("net.")}
    net = _build(net_class, config, net_kwargs, state, path)
    stmt_scale, access_scale = _scales(net)
    artifact = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "net_class": net_class,
        "config": dataclasses.asdict(net.config),
        "net_kwargs": net_kwargs,
        "state_dict": {k: v.detach().cpu() for k, v in net.state_dict().items()},
        "stmt_scale": stmt_scale,
        "access_scale": access_scale,
        "schema_version": schema,
        "source_device": device or str(ckpt.get("source_device", "unknown")),
        "checkpoint": os.path.abspath(path),
    }
    out = os.fspath(out)
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
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ArtifactError(
            f"{path}: feature schema version {data.get('schema_version')!r} does not match this code's "
            f"{SCHEMA_VERSION}; re-featurize and retrain, or use matching code"
        )
    net = _build(data["net_class"], data["config"], data.get("net_kwargs", {}), data["state_dict"], path)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bridge.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="a .ckpt written by train.py")
    parser.add_argument("--out", required=True, help="artifact path to write (.pt)")
    parser.add_argument("--device", default=None, help="source device name to record, e.g. cuda-sm_90a")
    args = parser.parse_args(argv)
    try:
        artifact = export_checkpoint(args.checkpoint, args.out, device=args.device)
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
