"""Where a network comes from: the zoo, or the user's own model as a torch factory, ONNX or relax file.

`load_network(spec)` turns any of these into an unfused relax IRModule plus example inputs, which
task extraction (`data.zoo.tasks`) and whole-network timing both start from:

* a zoo name (`data.zoo.NETWORKS`), e.g. ``resnet_50``;
* ``path/to/file.py:factory``: the file is imported (it is the user's own code) and `factory()`
  must return ``(module, example_inputs)`` — a `torch.nn.Module` and a tuple of tensors (or one
  tensor); it goes through `torch.export` like the zoo;
* ``model.onnx``: through relax's ONNX frontend; every graph input needs a static shape;
* ``model.json``: a relax IRModule saved with `tvm.ir.save_json` (TVM's own object serialization,
  which holds data only), with a relax function `main`.

Any load failure is a ValueError that names the file.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np

from tvm_env import tvm

__all__ = ["LoadedNetwork", "check_network", "load_network", "network_label"]


@dataclasses.dataclass
class LoadedNetwork:
    """An unfused relax module and one example input per parameter of its `main`."""

    name: str
    mod: tvm.IRModule
    inputs: list[np.ndarray]


def _kind(spec: str) -> str:
    """'zoo', 'torch', 'onnx' or 'relax' (no file access)."""
    from data.zoo.networks import NETWORKS

    if spec in NETWORKS:
        return "zoo"
    path, sep, _ = spec.rpartition(":")
    if sep and path.endswith(".py"):
        return "torch"
    if spec.endswith(".onnx"):
        return "onnx"
    if spec.endswith(".json"):
        return "relax"
    return "unknown"


def network_label(spec: str) -> str:
    """The name a network is recorded under: the zoo name, or the file's stem (`stem.factory` for torch files)."""
    kind = _kind(spec)
    if kind == "torch":
        path, _, factory = spec.rpartition(":")
        return f"{Path(path).stem}.{factory}"
    return spec if kind == "zoo" else Path(spec).stem


def check_network(spec: str) -> None:
    """Cheap check of a network spec (name known, file present) for argument validation.

    Raises:
        ValueError: neither a zoo name nor an existing `.py:factory`, `.onnx` or `.json` file.
    """
    from data.zoo.networks import NETWORKS

    kind = _kind(spec)
    if kind == "unknown":
        raise ValueError(
            f"network {spec!r} is not in the zoo (known: {sorted(NETWORKS)}) nor a model file "
            "(path.py:factory, model.onnx, relax_module.json)"
        )
    if kind != "zoo":
        path = spec.rpartition(":")[0] if kind == "torch" else spec
        if not Path(path).is_file():
            raise ValueError(f"network {spec!r}: file {path!r} does not exist")


def _zoo_module(name: str, size: int | None) -> tuple:
    import torch

    from data.zoo.networks import NETWORKS

    net = NETWORKS[name]
    size = size or net.default_size
    if size < net.min_size or (net.max_size is not None and size > net.max_size):
        raise ValueError(f"size={size!r} out of range for {name} ([{net.min_size}, {net.max_size}])")
    torch.manual_seed(0)
    return net.build().eval(), (net.example(size),)


def _zoo(name: str, size: int | None) -> LoadedNetwork:
    return _from_torch(name, *_zoo_module(name, size))


def _from_torch(name: str, model, example: tuple) -> LoadedNetwork:
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    with torch.no_grad():
        exported = torch.export.export(model, example)
    return LoadedNetwork(name, from_exported_program(exported), [t.detach().numpy() for t in example])


def _torch_file_module(spec: str) -> tuple:
    import torch

    path, _, factory = spec.rpartition(":")
    module_spec = importlib.util.spec_from_file_location(f"_user_model_{Path(path).stem}", path)
    if module_spec is None or module_spec.loader is None:
        raise ValueError(f"{path}: cannot be imported as a Python file")
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as err:
        raise ValueError(f"{path}: importing it failed ({type(err).__name__}: {err})") from err
    fn = getattr(module, factory, None)
    if not callable(fn):
        raise ValueError(f"{path}: has no function {factory!r}")
    made = fn()
    if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module)):
        raise ValueError(f"{path}:{factory}() must return (torch.nn.Module, example_inputs), got {type(made)}")
    model, example = made
    example = (example,) if isinstance(example, torch.Tensor) else tuple(example)
    if not example or not all(isinstance(t, torch.Tensor) for t in example):
        raise ValueError(f"{path}:{factory}(): example_inputs must be a tensor or a tuple of tensors")
    return model.eval(), example


def _torch_file(spec: str) -> LoadedNetwork:
    model, example = _torch_file_module(spec)
    path, _, factory = spec.rpartition(":")
    try:
        return _from_torch(network_label(spec), model, example)
    except Exception as err:
        raise ValueError(f"{path}:{factory}: torch.export / relax import failed ({type(err).__name__}: {err})") from err


def torch_module(spec: str, size: int | None = None) -> tuple:
    """(torch module in eval mode, example inputs tuple) of a zoo network or a `path.py:factory`
    model, for timing it in torch eager mode.

    Raises:
        ValueError: an ONNX or relax file (there is no torch module), or what `load_network` raises.
    """
    check_network(spec)
    kind = _kind(spec)
    if kind == "zoo":
        return _zoo_module(spec, size)
    if kind == "torch":
        return _torch_file_module(spec)
    raise ValueError(f"network {spec!r}: an {kind} file has no torch module to time in eager mode")


def _inputs_of(mod: tvm.IRModule, path: str) -> list[np.ndarray]:
    """Random example inputs for `main`'s parameters, from their static shapes and dtypes."""
    from tvm import relax

    rng = np.random.default_rng(0)
    inputs = []
    for param in mod["main"].params:
        info = param.ty  # apache-tvm 0.27: relax types (TensorType), no struct_info
        if not isinstance(info, relax.TensorType) or info.shape is None:
            raise ValueError(f"{path}: input {param.name!r} is not a tensor of known shape ({info})")
        try:
            shape = [int(d) for d in info.shape.values]
        except (TypeError, ValueError):
            raise ValueError(f"{path}: input {param.name!r} has a dynamic shape {info.shape}") from None
        dtype = str(info.dtype)
        if dtype.startswith("int"):
            inputs.append(rng.integers(0, 100, shape).astype(dtype))
        else:
            inputs.append(rng.standard_normal(shape).astype(dtype))
    return inputs


def _onnx_file(path: str) -> LoadedNetwork:
    try:
        import onnx
    except ImportError as err:
        raise ValueError(f"{path}: reading ONNX needs the `onnx` package (pip install onnx)") from err
    from tvm.relax.frontend.onnx import from_onnx

    try:
        model = onnx.load(path)  # protobuf: data only
        onnx.checker.check_model(model)
    except Exception as err:
        raise ValueError(f"{path}: not a valid ONNX model ({type(err).__name__}: {err})") from err
    initializers = {t.name for t in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in initializers:
            continue
        dims = inp.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") or d.dim_value <= 0 for d in dims):
            shape = [d.dim_value if d.HasField("dim_value") else d.dim_param or "?" for d in dims]
            raise ValueError(f"{path}: input {inp.name!r} has a dynamic shape {shape}; export it with static shapes")
    try:
        mod = from_onnx(model, keep_params_in_input=False)
    except Exception as err:
        raise ValueError(f"{path}: relax's ONNX frontend failed ({type(err).__name__}: {err})") from err
    return LoadedNetwork(Path(path).stem, mod, _inputs_of(mod, path))


def _relax_file(path: str) -> LoadedNetwork:
    from tvm import relax

    try:
        mod = tvm.ir.load_json(Path(path).read_text())
    except Exception as err:
        raise ValueError(f"{path}: not a TVM JSON object (tvm.ir.save_json) ({type(err).__name__}: {err})") from err
    if not isinstance(mod, tvm.IRModule):
        raise ValueError(f"{path}: holds a {type(mod).__name__}, not an IRModule")
    if "main" not in [gv.name_hint for gv in mod.get_global_vars()] or not isinstance(mod["main"], relax.Function):
        raise ValueError(f"{path}: the IRModule has no relax function 'main'")
    return LoadedNetwork(Path(path).stem, mod, _inputs_of(mod, path))


def load_network(spec: str, size: int | None = None) -> LoadedNetwork:
    """An unfused relax module and example inputs for `spec` (see the module docstring).

    Args:
        size: input image side / sequence length of a zoo network (None: its standard one);
            own models keep the input shapes they were made with.

    Raises:
        ValueError: unknown name, size out of range, or a file that cannot be loaded (named).
    """
    if size is not None and size <= 0:
        raise ValueError(f"size={size!r} must be positive")
    check_network(spec)
    kind = _kind(spec)
    if kind == "zoo":
        return _zoo(spec, size)
    if kind == "torch":
        return _torch_file(spec)
    return _onnx_file(spec) if kind == "onnx" else _relax_file(spec)
