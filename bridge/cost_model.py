"""Our cost models (PAM, MoA, TenSet MLP) as one MetaSchedule `PyCostModel`.

`PrunerCostModel` featurizes candidates with `data.features.featurize_candidates` (PerStoreFeature
rows, plus the GEMM matrix for PAM), builds a batch with `data.batch.make_batch` and scores
it with the network on the GPU when there is one. The tuning modes of docs/pruner.md section 2:

| mode | network | at start | after each measured batch ("round") |
|---|---|---|---|
| pam | PAMNet | untrained: all scores equal | train on this run's records (bounded, below) |
| pam-siamese-update | MoANet | the artifact (PAM or MoA) | every `adapt_every`-th round: `MoANet.adapt` (bounded) |
| pam-no-update | PAMNet / MoANet | the artifact | nothing |
| mlp | MLPNet | untrained: all scores equal | train on this run's records (bounded) |
| mlp-no-update | MLPNet | the artifact | nothing |

Bounded cost per round: a round trains on at most `replay` records, the newest batch plus a random
sample of the earlier ones. While the run has measured at most `replay` records, the from-scratch
modes retrain a fresh network on all of them for up to `epochs` epochs (as docs/pruner.md section 2
describes); past that, they continue training the current network ("warm") for up to
`warm_epochs` epochs. So the cost of an update stops growing with the number of trials (the
published flow retrains on everything, which makes late rounds of a long run the slowest). By
default the training runs in the background (`bridge.background`) while the next batch is searched,
built and run, and the next scoring waits for it: the same scores, off the tuning loop's path.

Labels of the online updates are `data.labels.normalized_throughput` of each task's records in this
run (best / latency, failed = 0), the same definition as offline training. From-scratch modes take
their normalization from the records they train on; MoA keeps the pretrained one.

Scores: `predict` returns (n,) float64, positive, higher = faster: softplus of the network output,
a fixed monotone map, so scores of different calls compare (the evolutionary search keeps one heap
across generations) and can weight parent sampling. Candidates that cannot be featurized (they
would not lower) get the smallest positive float.
"""

from __future__ import annotations

import copy
import functools
import os
import threading
import time
from collections.abc import Sequence

import numpy as np
import torch
from tvm.ir.utils import derived_object

from bridge.background import BackgroundJobs, warm_up_cuda
from bridge.export import Artifact, load_model
from bridge.model_state import read_state, write_state
from bridge.replay import replay_batches
from data.batch import compute_scales, make_batch
from data.features import FeatureCache, WalkPool, default_walk_workers, schedule_key, workload_tags
from data.labels import mean_latency
from data.schema import STMT_DIM
from pruner_models import registry
from pruner_models.losses import LOSSES
from pruner_models.moa import MoANet, train_online
from pruner_models.pam import PAMNet
from tvm_env import ms, tvm_ffi

__all__ = ["MODES", "PrunerCostModel"]

_MODES = registry.tuning_modes()
MODES = tuple(_MODES)
"""Tuning modes, derived from the model registry: pam, pam-siamese-update, pam-no-update, mlp, mlp-no-update."""
_PRETRAINED = {mode for mode, (_, policy) in _MODES.items() if policy != "scratch"}


_SEEDED = threading.Lock()
"""Held while a network is initialized from torch's global RNG, seeded: training threads share it."""


def _nets_for(mode: str) -> tuple[str, ...]:
    """Network classes a pretrained artifact of `mode` may hold: the entry's own and its siamese one's."""
    entry = _MODES[mode][0]
    return (entry.net_class, *((registry.MODELS[entry.siamese].net_class,) if entry.siamese else ()))


@derived_object
class PrunerCostModel(ms.cost_model.PyCostModel):
    """PAM / MoA / TenSet-MLP cost model for MetaSchedule (modes in the module docstring)."""

    def __init__(
        self,
        *,
        mode: str = "pam",
        artifact: str | os.PathLike | Artifact | None = None,
        device: str | None = None,
        epochs: int = 50,
        lr: float = 7e-4,
        weight_decay: float = 1e-6,
        loss: str = "lambdarank",
        patience: int | None = 5,
        adapt_every: int = 1,
        momentum: float = 0.99,
        batch_size: int = 512,
        seed: int = 0,
        workers: int | None = None,
        features: FeatureCache | None = None,
        replay: int = 1024,
        warm_epochs: int = 10,
        background: bool = True,
    ):
        """
        Args:
            mode: one of `MODES`.
            artifact: an exported artifact or a train.py .ckpt (or a loaded `Artifact`); required by
                the pretrained modes, refused by `pam` and `mlp` (they start from nothing).
            device: torch device for scoring and training (default: "cuda" when available, else "cpu").
            epochs: maximum epochs of each online training (docs/pruner.md: 50).
            lr, weight_decay, loss: Adam learning rate and weight decay, ranking loss of online training.
            patience: early stop of online training on the training loss (None: never).
            adapt_every: pam-siamese-update adapts after every this-many rounds (published: 4; docs/pruner.md).
            momentum: MoA target momentum (docs/pruner.md: 0.99) when the artifact is a plain PAM.
            batch_size: records per training batch (whole tasks are kept together when they fit).
            seed: seeds network initialization and batch order.
            workers: processes walking the TIR of large batches for PAM's GEMM input
                (`data.features.WalkPool`); None: `data.features.default_walk_workers()`.
            features: the run's shared `FeatureCache` (a draft model that featurized a candidate
                already saves this model the work); None: a cache of its own.
            replay: records one update trains on at most (the newest batch plus a random sample).
            warm_epochs: maximum epochs of a warm update (from-scratch modes past `replay` records).
            background: `update` records the batch and returns, and the training runs on a thread of
                its own while the next batch is searched, built and run; the next `predict` (or `save`,
                `load`) waits for it, so every score comes from the same network as without it (an
                `update` meanwhile queues its training behind it). False: `update` trains before it returns.
        """
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode={mode!r} must be one of {MODES}")
        if mode in _PRETRAINED and artifact is None:
            raise ValueError(f"mode={mode!r} needs a pretrained artifact or checkpoint (artifact=None)")
        if mode not in _PRETRAINED and artifact is not None:
            raise ValueError(
                f"mode={mode!r} trains from scratch during tuning; it takes no artifact (got {artifact!r})"
            )
        if loss not in LOSSES:
            raise ValueError(f"loss={loss!r} must be one of {sorted(LOSSES)}")
        for name, value in (
            ("epochs", epochs),
            ("adapt_every", adapt_every),
            ("batch_size", batch_size),
            ("replay", replay),
            ("warm_epochs", warm_epochs),
        ):
            if value < 1:
                raise ValueError(f"{name}={value!r} must be >= 1")
        self.mode = mode
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.train_options = dict(lr=lr, weight_decay=weight_decay, loss=loss, patience=patience)
        self.epochs, self.adapt_every, self.batch_size, self.seed = epochs, adapt_every, batch_size, seed
        self.replay, self.warm_epochs = replay, warm_epochs
        self.uses_gemm = mode.startswith("pam")
        self.net: torch.nn.Module | None = None
        self._is_trained = False
        if artifact is not None:
            loaded = artifact if isinstance(artifact, Artifact) else load_model(artifact)
            if loaded.net_class not in _nets_for(mode):
                raise ValueError(
                    f"mode={mode!r} needs a {' or '.join(_nets_for(mode))} artifact; {loaded.path} holds a {loaded.net_class}"
                )
            net = loaded.net
            if mode == "pam-siamese-update" and isinstance(net, PAMNet):
                net = MoANet.from_pretrained(net, momentum)
            self.net, self._is_trained = net.to(self.device).eval(), True
            self.source = loaded.path
        # Records measured in this run: task key -> lists of stmt rows, gemm matrices, latencies.
        self.data: dict[str, dict[str, list]] = {}
        self.tags: dict[str, np.ndarray] = {}
        # task key -> the schedules whose measurements `update` took (`bridge.catch_up`); None: not known
        # (a state saved before they were kept)
        self.seen: dict[str, set[int]] | None = {}
        self.rounds = 0
        if features is None:
            features = FeatureCache(pool=WalkPool(default_walk_workers() if workers is None else workers))
        self.features = features
        self._pending: list[tuple[str, int]] = []  # records not trained on yet (MoA adapts every few rounds)
        self.learn_s = 0.0  # seconds this model spent training in this run
        self._trainer = BackgroundJobs("pruner-learn") if background else None
        # predict may run on a search's background thread while update runs on the main one
        self._lock = threading.RLock()
        # A first CUDA training step pays seconds of start-up (context, cuBLAS, autograd kernels):
        # pay it on a thread while the first batch is searched, built and run.
        self._warming = BackgroundJobs("pruner-warm-up")
        if self.device.type == "cuda":
            self._warming.submit(functools.partial(warm_up_cuda, self.device))

    # ------------------------------------------------------------------------------------------
    # Features

    def _task(self, context) -> str:
        key = str(tvm_ffi.structural_hash(context.mod))
        if key not in self.tags:
            self.tags[key] = workload_tags(context.mod)
        return key

    def seen_in(self, context) -> set[int] | None:
        """The schedule keys of the task's measurements `update` took (None: not known, an old state,
        or a mode that never updates)."""
        if self.seen is None or self.mode.endswith("no-update"):
            return None
        return set(self.seen.get(self._task(context), ()))

    def _featurize(
        self, context, candidates: Sequence, keys: Sequence[int] | None = None
    ) -> list[tuple[np.ndarray, np.ndarray] | None]:
        """(stmt (n, 164), gemm (8, 23)) per candidate, None where featurizing failed (`self.features`;
        `keys`: the candidates' schedule keys, when the caller has them)."""
        feats = self.features.featurize(context, candidates, stmt=True, walk=self.uses_gemm, keys=keys)
        return [None if f is None else (f.stmt.reshape(-1, STMT_DIM), f.gemm_matrix) for f in feats]

    # ------------------------------------------------------------------------------------------
    # PyCostModel

    @torch.no_grad()
    def predict(self, context, candidates) -> np.ndarray:
        """(n,) float64 positive scores, higher = faster; all equal before any training."""
        with self._lock:
            return self._predict(context, list(candidates))

    def _predict(self, context, candidates: list) -> np.ndarray:
        self._trained_up()
        if not self._is_trained:
            return np.ones(len(candidates), dtype=np.float64)
        self._warmed()
        key = self._task(context)
        return self.score_features(key, self._featurize(context, candidates))

    @torch.no_grad()
    def score_features(self, key: str, feats: Sequence[tuple[np.ndarray, np.ndarray] | None]) -> np.ndarray:
        """`predict` on featurized candidates of task `key` ((stmt rows, gemm matrix), None where featurizing
        failed), e.g. records read back from shards by an offline replay (`self.tags[key]` set first)."""
        with self._lock:
            self._trained_up()
            if not self._is_trained:
                return np.ones(len(feats), dtype=np.float64)
            ok = [i for i, f in enumerate(feats) if f is not None]
            scores = np.full(len(feats), np.finfo(np.float64).tiny)
            if ok:
                raw = self._score([feats[i][0] for i in ok], np.stack([feats[i][1] for i in ok]), self.tags[key])
                scores[ok] = np.maximum(np.logaddexp(0.0, raw), np.finfo(np.float64).tiny)
            return scores

    def _score(self, stmt: list[np.ndarray], gemm: np.ndarray, tags: np.ndarray, chunk: int = 4096) -> np.ndarray:
        self.net.eval()
        out = []
        for start in range(0, len(stmt), chunk):
            batch = make_batch(stmt[start : start + chunk], tags, gemm[start : start + chunk])
            out.append(self.net({k: v.to(self.device) for k, v in batch.items()}).double().cpu().numpy())
        raw = np.concatenate(out)
        if not np.isfinite(raw).all():  # a NaN score would silently rank at random: refuse it
            source = getattr(self, "source", f"the {self.mode} network trained in this run")
            raise ValueError(f"{source}: {int((~np.isfinite(raw)).sum())} of {len(raw)} scores are NaN or inf")
        return raw

    def update(self, context, candidates, results) -> None:
        """Record the measured batch, then train per the mode (see the module docstring)."""
        if self.mode.endswith("no-update"):
            return
        with self._lock:
            self._update(context, list(candidates), list(results))

    def _update(self, context, candidates: list, results: list) -> None:
        keys = [schedule_key(c.sch.mod) for c in candidates]  # hashed once: for `seen` and the feature cache
        if self.seen is not None:
            self.seen.setdefault(self._task(context), set()).update(keys)
        feats, latencies = [], []
        for feat, result in zip(self._featurize(context, candidates, keys), results):
            if feat is None:
                continue
            run_secs = None if result.run_secs is None else [float(s) for s in result.run_secs]
            feats.append(feat)
            latencies.append(mean_latency(run_secs))
        self.learn(self._task(context), feats, latencies)

    def learn(self, key: str, feats: Sequence[tuple[np.ndarray, np.ndarray]], latencies: Sequence[float]) -> None:
        """`update` on one measured batch of task `key`, featurized ((stmt rows, gemm matrix) and mean latency
        in seconds, inf if failed, a record each): record it, then train per the mode. An offline replay
        calls this with records read back from shards (`self.tags[key]` set first)."""
        if self.mode.endswith("no-update"):
            return
        with self._lock:
            task = self.data.setdefault(key, {"stmt": [], "gemm": [], "latency": []})
            newest = []
            for (stmt, gemm), latency in zip(feats, latencies, strict=True):
                newest.append((key, len(task["latency"])))
                task["stmt"].append(stmt)
                task["gemm"].append(gemm)
                task["latency"].append(float(latency))
            self.rounds += 1
            self._pending.extend(newest)
            if self.mode == "pam-siamese-update" and self.rounds % self.adapt_every:
                return
            batches = self._batches(self._pending)
            self._pending = []
            if not batches:
                return
            job = functools.partial(self._train, batches, self.seed + self.rounds, self.measured())
            if self._trainer is None:
                job()
            else:  # the next `predict`, `save` or `load` waits for it (`_trained_up`)
                self._trainer.submit(job)

    def _train(self, batches: list[dict[str, torch.Tensor]], seed: int, measured: int) -> None:
        """One update's training on `batches`, per the mode, once the model held `measured` records."""
        start = time.perf_counter()
        self._warmed()
        on_device = [{k: v.to(self.device) for k, v in b.items()} for b in batches]
        if self.mode == "pam-siamese-update":
            self.net.adapt(on_device, epochs=self.epochs, seed=seed, **self.train_options)
        else:
            if self._is_trained and measured > self.replay:  # warm: continue the current network
                net, epochs = copy.deepcopy(self.net), self.warm_epochs
            else:
                with _SEEDED:  # another model's training thread must not draw from torch's RNG meanwhile
                    torch.manual_seed(seed)
                    net, epochs = _MODES[self.mode][0].new(), self.epochs
                net.set_scales(*compute_scales(batches))
                net = net.to(self.device)
            train_online(net, on_device, epochs=epochs, seed=seed, **self.train_options)
            self.net, self._is_trained = net.eval(), True
        self.learn_s += time.perf_counter() - start

    def _trained_up(self) -> None:
        """Wait for the update training in the background, if any; re-raises what it raised."""
        if self._trainer is not None:
            self._trainer.wait()

    @property
    def learn_wait_s(self) -> float:
        """Seconds of `learn_s` that scoring, a save or a load waited for: the rest overlapped."""
        return 0.0 if self._trainer is None else self._trainer.waited_s

    @property
    def trained(self) -> bool:
        """Whether the network has been trained (or loaded); waits for an update training in the background."""
        with self._lock:
            self._trained_up()
            return self._is_trained

    def _warmed(self) -> None:
        self._warming.wait()

    def measured(self) -> int:
        """Records of this run the model holds."""
        return sum(len(d["latency"]) for d in self.data.values())

    def _batches(self, newest: Sequence[tuple[str, int]] = ()) -> list[dict[str, torch.Tensor]]:
        """This round's training batches (`bridge.replay.replay_batches`): every record in `newest`
        ((task key, index) pairs) and a random sample of the others, at most `replay` in all."""
        rng = np.random.default_rng(self.seed + self.rounds)
        return replay_batches(self.data, self.tags, newest, replay=self.replay, batch_size=self.batch_size, rng=rng)

    def save(self, path: str) -> None:
        """Write the mode, the network (`pruner_models.registry.net_state`, if any) and this run's
        records, atomically (torch.save of tensors and plain types; `load` reads it with weights_only),
        once the trainings in the background are done."""
        self._save(path, wait=True)

    def save_later(self, path: str) -> None:
        """`save`, but returning at once: with `background`, the file is written on the training
        thread once the trainings in flight are done (the next `predict`, `save` or `load` waits for
        it), with the records as they are now. The state on disk is then always one whose network
        learned from every record beside it, and the tuning loop does not wait for it."""
        self._save(path, wait=False)

    def _save(self, path: str, wait: bool) -> None:
        with self._lock:
            records = {
                "rounds": self.rounds,
                "tags": dict(self.tags),
                "seen": None if self.seen is None else {k: sorted(v) for k, v in self.seen.items()},
                "data": {k: {name: list(column) for name, column in d.items()} for k, d in self.data.items()},
            }
            if wait or self._trainer is None:
                self._trained_up()
                self._write(path, records)
            else:
                self._trainer.submit(functools.partial(self._write, path, records))

    def _write(self, path: str, records: dict) -> None:
        write_state(path, mode=self.mode, trained=self._is_trained, net=self.net, **records)

    def load(self, path: str) -> None:
        """Restore what `save` wrote (`bridge.model_state.read_state`; the mode must match this model's).

        Raises:
            ValueError: a file that is not a saved PrunerCostModel, one saved in another mode, or one
                whose network holds non-finite weights (names the file and tensor).
        """
        with self._lock:
            self._trained_up()
            state = read_state(path, self.mode)
            self.rounds, self._is_trained = state["rounds"], state["trained"]
            if state["net"] is not None:
                self.net = state["net"].to(self.device).eval()
            self.tags, self.data = state["tags"], state["data"]
            self.seen = None if state["seen"] is None else {k: set(v) for k, v in state["seen"].items()}
