"""Linking a build's objects into a shared library with the linker alone.

TVM links an exported module with its C++ compiler's driver (`tvm.support.cc.create_shared`:
`g++ -shared -fPIC -o out.so lib0.o devc.o`). The driver starts the compiler's own chain (`g++`,
then `collect2`, then `ld`) and adds the C runtime's start-up objects and libraries, which a module
that TVM's runtime opens with `dlopen` does not need: its undefined symbols are TVM's runtime
functions and the C library's, which the process that loads it already has. On the 2-core dev VM
the driver took 17-18 ms to link an llvm matmul's object and `ld -shared` 2.3 ms, for the same
loadable module (timed by hand, 2026-11-30); a whole export took 12-19 ms less with `ld`, on the
host and on an H200 machine (`benchmarks/artifact_load.py`). A build worker that exports a `.so`
(`tvm_env.builder.export_so`) pays this for every candidate, on cores that build.

`link_shared` runs `ld -shared` itself when it is given only object files and no options, and hands
anything else (a C source to compile, compiler options, no `ld` on the PATH) to TVM's own.
`PRUNER_LINK=driver` makes it always use TVM's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

__all__ = ["link_shared", "linker"]


def linker() -> str | None:
    """The `ld` that `link_shared` runs, or None where it would use TVM's compiler driver."""
    if os.environ.get("PRUNER_LINK", "ld") == "driver":
        return None
    return shutil.which("ld")


def link_shared(output: str, objects: str | Sequence[str], options=None, **kwargs) -> None:
    """Link `objects` into the shared library `output`: `ld -shared` for plain objects, else
    `tvm.support.cc.create_shared(output, objects, options, **kwargs)`. An `export_library` compile
    function (`mod.export_library(path, fcompile=link_shared)`). A failed link raises RuntimeError
    with the linker's output and command."""
    files = [objects] if isinstance(objects, str) else list(objects)
    ld = linker()
    if ld is None or options or kwargs or not all(f.endswith(".o") for f in files):
        from tvm.support import cc

        cc.create_shared(output, files, options=options, **kwargs)
        return
    cmd = [ld, "-shared", "--eh-frame-hdr", "-o", output, *files]  # the frame index the driver asks for
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        text = done.stdout.decode("utf-8", errors="replace")
        raise RuntimeError(f"linking {output} failed:\n{text}\nCommand line: {' '.join(cmd)}")


link_shared.output_format = "so"  # as `tvm.support.cc.create_shared` says of itself
