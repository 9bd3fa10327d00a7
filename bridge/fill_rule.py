"""How many trials the next batch of a pipelined task gets, so that the device does not wait: `FillRule`.

With pipelined rounds (`bridge.pipeline`) the next batch is searched and built on the host while
the current batch runs on the device. A search costs about the same whatever the batch's size (a
draft, the verifier's ranking and its generation), the build and the run grow with it. In rounds of
16 on the H100 suite, the host's search and build of a batch took 3-6 s against 1-2 s of running
it, so the GPU sat idle 73-92% of an arm (docs/benchmarks.md, "Pipelined rounds that fill the
device"). The rule grows the batch until its run on the device lasts as long as the host's work
for the next one:

    next = clamp(ceil(job_s / (device_s / device_trials)), last, min(limit, 2 x current))

where `job_s` is the last background search-and-build, `device_s` the time the last batch took
from being handed out to its results (its build, already done ahead, and its run) and `last` the
size the rule chose last (at first the run's --trials-per-round). A batch grows at most twofold a
round and never shrinks: between two batches the device also waits for the loop's own work (the
cost model's update, the hand-out), about 0.5-1 s a round on the H100 suite, so a smaller batch
raises the idle share even when the host's job got cheaper. (Until 2026-11-26 the batch shrank to
match a cheaper job; with `straggler_grace` the jobs got cheaper, the batches fell to 30-60, the
rounds doubled, and so did the re-drafts that count rounds: docs/benchmarks.md, "a grace for straggling builds".)
"""

from __future__ import annotations

import math

__all__ = ["FillRule"]


class FillRule:
    """The size of a task's next batch, from the last batch's device time and the last host job."""

    def __init__(self, base: int, limit: int):
        """
        Args:
            base: the smallest batch (the run's trials per round).
            limit: the largest batch (0 or <= base: every batch is `base`).
        """
        if base < 1:
            raise ValueError(f"trials per round {base!r} must be >= 1")
        if limit < 0:
            raise ValueError(f"fill_device={limit!r} must be >= 0 (0: off)")
        self.base, self.limit = base, max(base, limit)
        self.device_rate: float | None = None  # device seconds a trial, of the last measured batch
        self.job_s: float | None = None  # seconds of the last background search and build
        self.size = base  # the size it chose last: the batch never shrinks below it

    def observe_device(self, seconds: float, trials: int) -> None:
        """A batch of `trials` took `seconds` from being handed out to its results."""
        if trials > 0 and seconds > 0:
            self.device_rate = seconds / trials

    def observe_job(self, seconds: float) -> None:
        """The host searched and built a batch ahead in `seconds`."""
        self.job_s = seconds

    def next(self, current: int) -> int:
        """The size of the batch after one of `current` trials."""
        if self.limit == self.base or self.device_rate is None or self.job_s is None:
            return self.base
        wanted = math.ceil(self.job_s / self.device_rate)
        self.size = max(self.size, min(wanted, self.limit, 2 * max(current, 1)))
        return self.size
