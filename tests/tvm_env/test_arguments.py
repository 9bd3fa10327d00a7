"""A runner's arguments (`tvm_env.arguments`): integer tensors set to ones, so that an embedding lookup is
measured instead of reading out of bounds, and an integer division does not trap; on real llvm tuning."""

import numpy as np
import pytest

from bridge.config import CostModelConfig, MeasureConfig, SearchConfig, TuneConfig
from bridge.tuning import tune_tasks
from data import zoo
from data.zoo import TaskSpec
from tvm_env import tvm
from tvm_env.arguments import alloc_local

TARGET = {"kind": "llvm", "mcpu": "native", "num-cores": 2}


def _runs(tasks, tmp_path) -> list[float]:
    """Seconds of every measured run of `tasks`, tuned for 4 trials on the host (1e10: failed)."""
    result = tune_tasks(
        tasks,
        TARGET,
        TuneConfig(out=str(tmp_path), trials=4, trials_per_round=4),
        cost_model=CostModelConfig(name="random"),
        search=SearchConfig(psa=None),
        measure=MeasureConfig(number=2, min_repeat_ms=0),
        progress=False,
    )
    return [float(s) for r in result.database.get_all_tuning_records() for s in r.run_secs]


def test_integer_tensors_are_ones_and_the_others_random():
    info = [["TENSOR", "int32", [4]], ["TENSOR", "float32", [64]], ["TENSOR", "int64", [3]], ["TENSOR", "uint8", [2]]]
    sets = alloc_local(tvm.cpu(), info, 2)
    assert len(sets) == 2 and sets[0][1] is not sets[1][1]
    for args in sets:
        ints, floats, longs, bytes_ = (a.numpy() for a in args)
        assert ints.dtype == np.int32 and (ints == 1).all() and (longs == 1).all() and (bytes_ == 1).all()
        assert floats.shape == (64,) and np.unique(floats).size > 32  # random, as MetaSchedule's fill
    with pytest.raises(NotImplementedError, match="'SCALAR'"):
        alloc_local(tvm.cpu(), [["SCALAR", "int32"]], 1)


def test_an_embedding_lookup_is_measured(tmp_path):
    """BERT-tiny's `take` (token ids into a 30522-row table): with MetaSchedule's random fill its ids
    are about 1e9 and every candidate failed; with ones, its runs are valid."""
    tasks = [t for t in zoo.extract_network_tasks("bert_tiny", TARGET, 16) if t.name == "take"]
    assert len(tasks) == 1
    runs = _runs(tasks, tmp_path)
    assert runs and all(0 < s < 1e-2 for s in runs), runs  # 1e10: MetaSchedule's failed run


def test_an_integer_division_is_measured(tmp_path):
    """A kernel dividing by an integer tensor: zeros there trap (SIGFPE on llvm), ones do not."""
    from tvm import te

    a = te.placeholder((256,), "int32", name="A")
    b = te.placeholder((256,), "int32", name="B")
    c = te.compute((256,), lambda i: tvm.tirx.floordiv(a[i], b[i]), name="C")
    mod = tvm.IRModule({"main": te.create_prim_func([a, b, c])})
    runs = _runs([TaskSpec.from_mod("floordiv", mod, 1)], tmp_path)
    assert runs and all(0 < s < 1e-2 for s in runs), runs
