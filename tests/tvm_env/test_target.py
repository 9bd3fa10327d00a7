"""tvm_env: target parsing (the forms apache-tvm 0.27 accepts and refuses), device names."""

import os

import pytest

from tvm_env import is_gpu, parse_target, target_device_name, tvm


def test_dict_json_and_tag_forms():
    cpu = parse_target({"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 2})
    assert target_device_name(cpu) == "llvm-sapphirerapids-2c" and not is_gpu(cpu)
    assert parse_target('{"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 2}').export() == cpu.export()
    h100 = parse_target("nvidia/nvidia-h100")
    assert is_gpu(h100) and target_device_name(h100) == "cuda-sm_90a"


def test_cpu_gets_the_core_count_and_native_cpu():
    target = parse_target({"kind": "llvm", "mcpu": "native"})
    attrs = target.export()
    assert attrs["num-cores"] == os.cpu_count()
    assert attrs["mcpu"] == str(tvm.target.codegen.llvm_get_system_cpu()) != "native"


def test_cli_form_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="CLI form is not accepted.*nvidia/nvidia-h100"):
        parse_target("llvm -mcpu=skylake")
