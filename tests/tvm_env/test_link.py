"""tvm_env.link: a build's objects linked by `ld` alone give the module TVM's compiler driver gives
(the same defined symbols, no C runtime start-up), and anything but plain objects goes to TVM's own."""

import subprocess

import pytest
from test_nvrtc import H100, _sample, cuda_env, needs_cuda  # noqa: F401 (a fixture)

from data.zoo import operator_task
from tvm_env import fast_build, parse_target, setup, tvm
from tvm_env.link import link_shared, linker


def _symbols(path, *which: str) -> set[str]:
    out = subprocess.run(["nm", "-D", *which, str(path)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def _needed(path) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    return [line.split("[")[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]


@needs_cuda
def test_a_cuda_module_linked_by_ld_defines_what_the_drivers_link_does(cuda_env, tmp_path):  # noqa: F811
    """A CUDA build (host code and the packed cubin) exported both ways: the same symbols defined,
    TVM's runtime call the only undefined one; the driver's adds only the C runtime's hooks."""
    target = parse_target(H100)
    setup(target)
    lib = fast_build(_sample(operator_task("matmul:128,128,128"), target, seed=1).mod, target, None)
    lib.export_library(str(tmp_path / "ld.so"), fcompile=link_shared)
    lib.export_library(str(tmp_path / "driver.so"))
    defined = _symbols(tmp_path / "ld.so", "--defined-only")
    assert defined == _symbols(tmp_path / "driver.so", "--defined-only")
    assert {"__tvm_ffi__library_bin", "__tvm_ffi_main"} <= defined  # the cubin blob and the entry
    undefined = _symbols(tmp_path / "ld.so", "--undefined-only")
    assert undefined and undefined < _symbols(tmp_path / "driver.so", "--undefined-only")
    assert "__cxa_finalize" not in undefined and _needed(tmp_path / "ld.so") == []


def _llvm_objects(tmp_path):
    """The object file of a real llvm build (what MetaSchedule's `.tar` holds)."""
    from tvm import te

    target = parse_target({"kind": "llvm", "num-cores": 1})
    a = te.placeholder((16,), name="A")
    b = te.compute((16,), lambda i: a[i] * 2.0, name="B")
    lib = tvm.tirx.build(tvm.IRModule({"main": te.create_prim_func([a, b])}), target)
    lib.export_library(str(tmp_path / "m.tar"))
    subprocess.run(["tar", "xf", str(tmp_path / "m.tar"), "-C", str(tmp_path)], check=True)
    return [str(p) for p in sorted(tmp_path.glob("*.o"))]


def test_objects_go_to_ld_and_the_rest_to_tvms_driver(tmp_path, monkeypatch):
    objects = _llvm_objects(tmp_path)
    assert objects and linker() is not None
    link_shared(str(tmp_path / "ld.so"), objects)
    # no C runtime start-up objects: `ld` alone linked it (the driver's bring __cxa_finalize's hook)
    assert "__cxa_finalize" not in _symbols(tmp_path / "ld.so", "--undefined-only")
    monkeypatch.setenv("PRUNER_LINK", "driver")
    assert linker() is None
    link_shared(str(tmp_path / "driver.so"), objects)
    assert "__cxa_finalize" in _symbols(tmp_path / "driver.so", "--undefined-only")
    monkeypatch.delenv("PRUNER_LINK")
    source = tmp_path / "f.c"
    source.write_text("int pruner_f(void) { return 7; }\n")
    link_shared(str(tmp_path / "c.so"), [str(source)])  # a C source needs the compiler
    assert any("pruner_f" in name for name in _symbols(tmp_path / "c.so", "--defined-only"))  # g++: mangled
    assert _symbols(tmp_path / "driver.so", "--defined-only") == _symbols(tmp_path / "ld.so", "--defined-only")


def test_a_failed_link_names_the_output_and_the_command(tmp_path):
    bad = tmp_path / "bad.o"
    bad.write_bytes(b"not an object")
    with pytest.raises(RuntimeError, match=r"(?s)linking .*out\.so failed:.*Command line: .*ld -shared .*-o .*out\.so"):
        link_shared(str(tmp_path / "out.so"), [str(bad)])
    assert not (tmp_path / "out.so").exists()
