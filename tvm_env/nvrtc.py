"""NVRTC builds of TVM's CUDA kernels without the libcu++ headers a kernel does not use.

Where a CUDA candidate's build time goes (`benchmarks/build_profile.py`, on the host): TVM's
lowering and code generation take about 0.2 s, NVRTC the rest (1-3 s). About 1 s of every NVRTC
compile is spent parsing two libcu++ headers: TVM 0.27's `tvm_callback_cuda_compile` prepends
`#include <cuda/std/limits>` to every kernel (for `INFINITY`), and the generated code includes
`<cuda/std/type_traits>` for eight `std::` aliases. Most kernels use neither.

`compile_cuda` compiles the same code with the same NVRTC options as TVM's NVRTC path, and keeps a
header only when the kernel uses what it provides: `<cuda/std/limits>` when the code names
`INFINITY` or `numeric_limits`, the type-traits aliases when the code says `std::` anywhere else.
The kernel's PTX is the same (tests/test_nvrtc.py compares it with TVM's, line by line); what is
gone is the headers' unused `constexpr` globals. Code this module does not handle (TMA tensor
maps, NVSHMEM) goes to TVM's own compile.

`install()` makes it the process's `tvm_callback_cuda_compile` (TVM's C++ CUDA code generator calls
that function by name); `tvm_env.fast_build` installs it in every builder worker. It honours
TVM's `TVM_CUDA_COMPILE_MODE=nvcc`, and `PRUNER_NVRTC_LITE=0` keeps TVM's compile (to compare).

A compile-size guard (`set_max_source_kb`, off unless set): NVRTC's time grows with the generated
source, which explicit unrolling can make megabytes long (a 1.1 MB batch_matmul kernel took 9.5 s
on one core where the median candidate takes 0.2 s, and a batch of builds waits for its slowest).
Kernels over the limit are refused at once with an error that says so, a failed build like a
timeout but without the wait. The best schedules the H100 suite found were at most 200 KB of source
(docs/benchmarks.md). The guard is TVM's `tvm_callback_cuda_postproc`, which the CUDA code generator
calls with the source before it calls the compile callback: so a refusal happens before NVRTC on a
GPU machine's TVM, and in the build itself on a TVM without the CUDA runtime too (which generates
the source but compiles nothing), where a test can take a build, a builder or a collection through it.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shlex
import shutil
from typing import Any

from tvm_env import compile_cache

log = logging.getLogger(__name__)

__all__ = [
    "SourceTooLarge",
    "compile_cuda",
    "check_max_source_kb",
    "check_source",
    "is_refused",
    "cuda_path",
    "has_headers",
    "install",
    "kernel_lines",
    "lighten",
    "lite_enabled",
    "set_max_source_kb",
]

_max_source_kb: float | None = None


class SourceTooLarge(RuntimeError):
    """A kernel's CUDA source is over the compile-size guard (`set_max_source_kb`): not compiled."""


def check_max_source_kb(limit: float | None) -> None:
    """Raise ValueError unless `limit` is a usable source limit: > 0 KB, or None (no limit)."""
    if limit is not None and not limit > 0:
        raise ValueError(f"max_source_kb={limit!r} must be > 0 (or None: no limit)")


def set_max_source_kb(limit: float | None) -> None:
    """Refuse to compile kernels whose CUDA source is over `limit` KB in this process (None: no limit)."""
    global _max_source_kb
    check_max_source_kb(limit)
    _max_source_kb = limit


def _kernel_line(code: str) -> str:
    """The first `__global__` line of a CUDA source, to name the kernel in messages ("?" if none)."""
    return next((line.strip() for line in code.splitlines() if "__global__" in line), "?")


_TRAITS_BLOCK = re.compile(r"[ \t]*#include <cuda/std/type_traits>\s*namespace std \{[^{}]*\}[ \t]*\n")
"""The `<cuda/std/type_traits>` include and the `namespace std { using ...; }` aliases TVM's CUDA
code generator writes into the `__CUDACC_RTC__` branch of every kernel's prelude."""

_STD_USE = re.compile(r"(?<!cuda::)(?<![\w:])std::")
"""A `std::` name not spelled `cuda::std::` (what the aliases exist for)."""

_PRELUDE = """#include <cuda/std/cstdint>
using cuda::std::uint8_t;
using cuda::std::uint16_t;
using cuda::std::uint32_t;
using cuda::std::uint64_t;
using cuda::std::int8_t;
using cuda::std::int16_t;
using cuda::std::int32_t;
using cuda::std::int64_t;

#ifndef __asm__
#define __asm__ asm
#endif
#ifndef __volatile__
#define __volatile__ volatile
#endif
"""
"""TVM 0.27's NVRTC prelude (`tvm.support.nvcc._compile_cuda_nvrtc`) without `<cuda/std/limits>`."""

_LIMITS = """#include <cuda/std/limits>
#ifndef INFINITY
#define INFINITY (::cuda::std::numeric_limits<float>::infinity())
#endif
"""

_installed = False
_previous_postproc: Any = None  # a tvm_callback_cuda_postproc registered before install()


def lighten(code: str) -> str:
    """`code` (TVM's generated CUDA) with our prelude, and without the headers it does not use."""
    code = "\n".join(line for line in code.splitlines() if line.strip() != "#include <cuda.h>")
    light = _TRAITS_BLOCK.sub("", code, count=1)
    if _STD_USE.search(light):
        light = code  # the kernel uses an alias: keep the block
    limits = _LIMITS if ("INFINITY" in code or "numeric_limits" in code) else ""
    return _PRELUDE + limits + "\n" + light


def kernel_lines(ptx: bytes | bytearray) -> list[str]:
    """The non-empty lines of `ptx` without the libcu++ headers' namespace-scope constants (`.global`
    symbols of `cuda::`): what must be the same for TVM's compile and `compile_cuda`."""
    text = bytes(ptx).rstrip(b"\0").decode()
    return [
        line for line in text.splitlines() if line.strip() and not (line.startswith(".global") and "4cuda3" in line)
    ]


def cuda_path() -> str:
    """The CUDA toolkit root: $CUDA_PATH, else nvcc's folder (symlinks followed), else
    /usr/local/cuda; the first of them with `include/cuda_runtime.h`. (TVM's `find_cuda_path` takes
    nvcc's folder as it is found, which is wrong for a symlink or a wrapper in /usr/local/bin.)"""
    if "CUDA_PATH" in os.environ:
        return os.environ["CUDA_PATH"]
    roots = []
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    roots.append("/usr/local/cuda")
    return next((r for r in roots if os.path.isfile(os.path.join(r, "include", "cuda_runtime.h"))), roots[0])


def has_headers() -> bool:
    """Whether the CUDA toolkit's headers, which NVRTC compiles against, are at `cuda_path()`."""
    return os.path.isfile(os.path.join(cuda_path(), "include", "cuda_runtime.h"))


def _options(arch: str) -> list[bytes]:
    """TVM 0.27's NVRTC options for `arch` (include paths, macros, fast math, ptxas flags)."""
    from tvm.support import nvcc

    root = cuda_path()
    includes = [os.path.join(root, "include")]
    arch_include = nvcc._find_cuda_target_include(root)
    if arch_include:
        includes.append(arch_include)
        if os.path.isdir(os.path.join(arch_include, "cccl")):
            includes.append(os.path.join(arch_include, "cccl"))
    includes = [p for p in includes if os.path.isdir(p)]
    if not any(os.path.isfile(os.path.join(p, "cuda_runtime.h")) for p in includes):
        raise RuntimeError(f"no CUDA headers (cuda_runtime.h) under {root}: set CUDA_PATH to the CUDA toolkit")
    opts = [f"--gpu-architecture={arch}", "-default-device", "--device-int128"]
    opts += [f"-I{p}" for p in includes]
    opts += [f"-D{m}=" for m in ("__NV_SILENCE_DEPRECATION_BEGIN", "__NV_SILENCE_DEPRECATION_END")]
    opts += [f"-D{m}=" for m in ("__NV_SILENCE_HOST_DEPRECATION_BEGIN", "__NV_SILENCE_HOST_DEPRECATION_END")]
    for kind in ("HALF", "BFLOAT16", "BFLOAT162"):
        opts += [f"-U__CUDA_NO_{kind}_OPERATORS__", f"-U__CUDA_NO_{kind}_CONVERSIONS__"]
    opts.append("--use_fast_math")
    opts += [f"--ptxas-options={flag}" for flag in nvcc._ptxas_option_flags()]
    extra = os.environ.get("TVM_CUDA_NVRTC_EXTRA_OPTS", "").strip()
    if extra:
        opts += shlex.split(extra)
    return [o.encode() for o in opts]


def _arch(target_format: str, arch: str | None) -> str:
    """NVRTC's architecture for `target_format` ("cubin": sm_XX, "ptx": compute_XX), from `arch` or
    (as TVM does) the current target or the GPU of this machine."""
    if arch is None:
        from tvm.support import nvcc
        from tvm.target import Target

        arch = "sm_" + nvcc.get_target_compute_version(Target.current(allow_none=True)).replace(".", "")
    suffix = arch.split("_", 1)[1]
    return f"compute_{suffix}" if target_format == "ptx" else f"sm_{suffix}"


def _check(nvrtc: Any, result: Any, prog: Any, what: str) -> None:
    if result == nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return
    _, size = nvrtc.nvrtcGetProgramLogSize(prog)
    log = bytearray(size)
    nvrtc.nvrtcGetProgramLog(prog, log)
    nvrtc.nvrtcDestroyProgram(prog)
    raise RuntimeError(f"NVRTC {what} failed ({result}):\n{log.decode('utf-8', 'replace')}")


def compile_cuda(code: str, target_format: str = "cubin", arch: str | None = None) -> bytearray:
    """Compile TVM's generated CUDA `code` to a cubin (or PTX) as TVM's NVRTC path does, without
    the headers the kernel does not use. Tensor-map and NVSHMEM kernels go to TVM's compile."""
    from tvm.support import nvcc

    if "CUtensorMap" in code or "nvshmem" in code:
        return nvcc.compile_cuda(code, target_format=target_format, arch=arch, compiler="nvrtc")
    from cuda.bindings import nvrtc

    result, prog = nvrtc.nvrtcCreateProgram(lighten(code).encode(), b"tvm_kernels.cu", 0, None, None)
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"NVRTC could not create the program: {result}")
    opts = _options(_arch(target_format, arch))
    (result,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    _check(nvrtc, result, prog, "compilation")
    get_size, get = (
        (nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN)
        if target_format == "cubin"
        else (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX)
    )
    result, size = get_size(prog)
    _check(nvrtc, result, prog, f"{target_format} size")
    out = bytearray(size)
    (result,) = get(prog, out)
    _check(nvrtc, result, prog, target_format)
    nvrtc.nvrtcDestroyProgram(prog)
    return out


def _callback(code: str) -> bytearray:
    """`tvm_callback_cuda_compile`: ours unless TVM_CUDA_COMPILE_MODE=nvcc or PRUNER_NVRTC_LITE=0.

    Where ours fails and TVM's compiles, TVM's result is used and a warning names the kernel's
    first line (a candidate is never lost to this module); where both fail, TVM's error stands.
    Either way, a source compiled before in the process's `compile_cache` folder is not compiled again.
    """
    from tvm.support import nvcc

    mode = os.environ.get("TVM_CUDA_COMPILE_MODE", "nvrtc").lower()
    lite = mode == "nvrtc" and lite_enabled()
    compile_it = functools.partial(_compile_or_tvms if lite else nvcc.tvm_callback_cuda_compile, code)
    return compile_cache.compiled(code, functools.partial(_salt, mode, lite), compile_it)


def _compile_or_tvms(code: str) -> bytearray:
    from tvm.support import nvcc

    try:
        return compile_cuda(code)
    except RuntimeError as err:
        out = nvcc.tvm_callback_cuda_compile(code)
        log.warning("tvm_env.nvrtc could not compile what TVM's compile did (%s): %s", _kernel_line(code), err)
        return out


SALT_ENV = (
    "CUDA_PATH",
    "TVM_CUDA_NVRTC_EXTRA_OPTS",
    "TVM_CUDA_PTXAS_REG_LEVEL",
    "TVM_CUDA_PTXAS_EXTRA_OPTS",
    "TVM_KERNEL_DUMP",
)
"""The environment that TVM's and our CUDA compiles read, so part of what a kept compile depends on."""


def _salt(mode: str, lite: bool) -> str:
    """What a compile's output depends on besides the source (`compile_cache.compiled`): the compiler
    (ours, TVM's NVRTC or nvcc) and NVRTC's version, the architecture, our options (the CUDA root's
    headers, ptxas flags), and the environment the compiles read (`SALT_ENV`)."""
    arch = _arch("cubin", None)
    parts = [mode, str(lite), arch, *(f"{k}={os.environ.get(k, '')}" for k in SALT_ENV)]
    try:
        from cuda.bindings import nvrtc as bindings

        parts.append(repr(bindings.nvrtcVersion()))
        parts.extend(o.decode() for o in _options(arch))
    except (ImportError, RuntimeError, ValueError):  # no NVRTC or headers here, bad extra options: the compile says so
        pass
    return "\0".join(parts)


def lite_enabled() -> bool:
    """False when PRUNER_NVRTC_LITE=0 (TVM's own NVRTC compile, headers and all)."""
    return os.environ.get("PRUNER_NVRTC_LITE", "1") != "0"


REFUSED = "(max_source_kb), not compiled"  # in the error of every build the guard refused


def is_refused(error_msg: str | None) -> bool:
    """Whether a build's error message (a MetaSchedule BuilderResult's) is the source guard's refusal."""
    return bool(error_msg) and REFUSED in error_msg


def check_source(code: str) -> None:
    """Raise `SourceTooLarge` if `code` is over this process's source limit (`set_max_source_kb`)."""
    if _max_source_kb is not None and len(code) > _max_source_kb * 1024:
        raise SourceTooLarge(
            f"CUDA source of {len(code) / 1024:.0f} KB is over the builder's {_max_source_kb:g} KB limit "
            f"{REFUSED}: {_kernel_line(code)}"
        )


def _postproc(code: str, target: Any = None) -> str:
    """`tvm_callback_cuda_postproc`: the source guard, then the postproc that was there before (if any)."""
    check_source(code)
    return code if _previous_postproc is None else _previous_postproc(code, target)


def install() -> None:
    """Make `compile_cuda` this process's `tvm_callback_cuda_compile`, and the source guard its
    `tvm_callback_cuda_postproc` (keeping one registered before; once; idempotent)."""
    global _installed, _previous_postproc
    if _installed:
        return
    import tvm

    _previous_postproc = tvm.get_global_func("tvm_callback_cuda_postproc", allow_missing=True)
    tvm.register_global_func("tvm_callback_cuda_postproc", _postproc, override=True)
    tvm.register_global_func("tvm_callback_cuda_compile", _callback, override=True)
    _installed = True
