"""benchmarks/task_peak.py: peak@1 task by task."""

import numpy as np
import pytest
from benchmark_files import load_benchmark

task_peak = load_benchmark("task_peak")


def test_each_task_scores_its_top_pick_against_its_best():
    latency = np.array([2.0, 1.0, 4.0, 3.0, 6.0, 5.0])
    task = np.array([0, 0, 0, 1, 1, 2])
    labels = np.array([1 / 2, 1, 1 / 4, 1, 3 / 6, 1])  # each task's best latency / latency
    scores = np.array([0.9, 0.5, 0.1, 0.2, 0.8, 1.0])
    assert task_peak.task_peaks(scores, labels, task) == {0: 0.5, 1: 0.5, 2: 1.0}
    assert task_peak.task_peaks(-latency, labels, task) == {0: 1.0, 1: 1.0, 2: 1.0}


def test_one_seed_a_checkpoint():
    with pytest.raises(ValueError, match="2 checkpoints for 1 seeds"):
        task_peak.task_peak("shards", ["resnet_50"], ["a.ckpt", "b.ckpt"], [0])
