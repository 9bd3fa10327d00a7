"""A CUDA tuning run whose builder refuses every pick over its source guard. No GPU is needed: a
refused build never reaches the runner. Each round counts its refused picks, and the run's curve,
summary and report say how many, so a user sees when `--max-source-kb` takes a run's slots."""

import io

from rich.console import Console

from bridge.config import CostModelConfig, SearchConfig, TuneConfig
from bridge.report import print_report, summary
from bridge.search_log import read_rounds
from bridge.tuning import CURVE_CSV, tune_tasks
from data.zoo import operator_task
from tvm_env import ms


def test_picks_refused_over_the_source_guard_are_counted_per_round_and_reported(tmp_path, make_builder):
    builder = make_builder(max_workers=1, max_source_kb=0.1)  # every CUDA kernel is over 0.1 KB
    result = tune_tasks(
        [operator_task("matmul:64,64,64")],
        "nvidia/nvidia-h100",
        TuneConfig(out=str(tmp_path), trials=4, trials_per_round=2, seed=0),
        search=SearchConfig(population=32),
        cost_model=CostModelConfig(name="random"),
        builder=builder,
        runner=ms.runner.LocalRunner(),
        progress=False,
    )
    assert [(r["trials"], r["valid"], r["refused"]) for r in result.rows] == [(2, 0, 2), (2, 0, 2)]
    assert [r["refused"] for r in read_rounds(tmp_path / CURVE_CSV)] == [2, 2]  # the saved curve keeps it
    assert result.builds["refused"] == 4 and summary(result)["builds"]["refused"] == 4
    out = io.StringIO()
    print_report(result, Console(file=out, width=200))
    assert "builds: 4 picks refused, their CUDA source over --max-source-kb" in out.getvalue()
