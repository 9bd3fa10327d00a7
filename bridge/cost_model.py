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
published flow retrains on everything, which makes late rounds of a long run the slowest).

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
import io
import os
import threading
from collections.abc import Sequence

import numpy as np
import torch
from tvm.ir.utils import derived_object

from bridge.export import Artifact, load_model
from data.atomic import atomic_write_bytes
from data.batch import compute_scales, make_batch
from data.features import FeatureCache, WalkPool, default_walk_workers, workload_tags
from data.labels import mean_latency, normalized_throughput
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


def _warm_up(device: torch.device) -> None:
    """One small training step on `device`, so the run's first update does not start CUDA."""
    try:
        net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)
        optimizer = torch.optim.Adam(net.parameters())
        net(torch.randn(256, 64, device=device)).square().mean().backward()
        optimizer.step()
        torch.cuda.synchronize(device)
    except Exception:  # a warm-up is an optimization: the first update reports a real problem
        pass


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
        self.trained = False
        if artifact is not None:
            loaded = artifact if isinstance(artifact, Artifact) else load_model(artifact)
            if loaded.net_class not in _nets_for(mode):
                raise ValueError(
                    f"mode={mode!r} needs a {' or '.join(_nets_for(mode))} artifact; {loaded.path} holds a {loaded.net_class}"
                )
            net = loaded.net
            if mode == "pam-siamese-update" and isinstance(net, PAMNet):
                net = MoANet.from_pretrained(net, momentum)
            self.net, self.trained = net.to(self.device).eval(), True
            self.source = loaded.path
        # Records measured in this run: task key -> lists of stmt rows, gemm matrices, latencies.
        self.data: dict[str, dict[str, list]] = {}
        self.tags: dict[str, np.ndarray] = {}
        self.rounds = 0
        if features is None:
            features = FeatureCache(pool=WalkPool(default_walk_workers() if workers is None else workers))
        self.features = features
        self._pending: list[tuple[str, int]] = []  # records not trained on yet (MoA adapts every few rounds)
        # predict may run on a search's background thread while update runs on the main one
        self._lock = threading.RLock()
        # A first CUDA training step pays seconds of start-up (context, cuBLAS, autograd kernels):
        # pay it on a thread while the first batch is searched, built and run.
        self._warming = None
        if self.device.type == "cuda":
            self._warming = threading.Thread(target=_warm_up, args=(self.device,), daemon=True)
            self._warming.start()

    # ------------------------------------------------------------------------------------------
    # Features

    def _task(self, context) -> str:
        key = str(tvm_ffi.structural_hash(context.mod))
        if key not in self.tags:
            self.tags[key] = workload_tags(context.mod)
        return key

    def _featurize(self, context, candidates: Sequence) -> list[tuple[np.ndarray, np.ndarray] | None]:
        """(stmt (n, 164), gemm (8, 23)) per candidate, None where featurizing failed (`self.features`)."""
        feats = self.features.featurize(context, candidates, stmt=True, walk=self.uses_gemm)
        return [None if f is None else (f.stmt.reshape(-1, STMT_DIM), f.gemm_matrix) for f in feats]

    # ------------------------------------------------------------------------------------------
    # PyCostModel

    @torch.no_grad()
    def predict(self, context, candidates) -> np.ndarray:
        """(n,) float64 positive scores, higher = faster; all equal before any training."""
        with self._lock:
            return self._predict(context, list(candidates))

    def _predict(self, context, candidates: list) -> np.ndarray:
        if not self.trained:
            return np.ones(len(candidates), dtype=np.float64)
        self._warmed()
        key = self._task(context)
        return self.score_features(key, self._featurize(context, candidates))

    @torch.no_grad()
    def score_features(self, key: str, feats: Sequence[tuple[np.ndarray, np.ndarray] | None]) -> np.ndarray:
        """`predict` on featurized candidates of task `key` ((stmt rows, gemm matrix), None where featurizing
        failed), e.g. records read back from shards by an offline replay (`self.tags[key]` set first)."""
        with self._lock:
            if not self.trained:
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
        feats, latencies = [], []
        for feat, result in zip(self._featurize(context, candidates), results):
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
            self._warmed()
            on_device = [{k: v.to(self.device) for k, v in b.items()} for b in batches]
            seed = self.seed + self.rounds
            if self.mode == "pam-siamese-update":
                self.net.adapt(on_device, epochs=self.epochs, seed=seed, **self.train_options)
                return
            if self.trained and self.measured() > self.replay:
                net, epochs = copy.deepcopy(self.net), self.warm_epochs  # warm: continue the current network
            else:
                torch.manual_seed(seed)
                net, epochs = _MODES[self.mode][0].new(), self.epochs
                net.set_scales(*compute_scales(batches))
                net = net.to(self.device)
            train_online(net, on_device, epochs=epochs, seed=seed, **self.train_options)
            self.net, self.trained = net.eval(), True

    def _warmed(self) -> None:
        if self._warming is not None:
            self._warming.join()
            self._warming = None

    def measured(self) -> int:
        """Records of this run the model holds."""
        return sum(len(d["latency"]) for d in self.data.values())

    def _batches(self, newest: Sequence[tuple[str, int]] = ()) -> list[dict[str, torch.Tensor]]:
        """Task-grouped training batches of at most `replay` records of this run: every record in
        `newest` ((task key, index) pairs) and a random sample of the others.

        A task enters once it has two records with different labels (labels are per task, over all
        its records). Tasks are packed whole into batches of up to `batch_size` records; a larger
        task is split into random chunks.
        """
        rng = np.random.default_rng(self.seed + self.rounds)
        labels = {key: normalized_throughput(np.asarray(task["latency"])) for key, task in self.data.items()}
        usable = {key for key, lab in labels.items() if len(lab) >= 2 and np.ptp(lab) > 0}
        fresh = [(k, i) for k, i in newest if k in usable]
        chosen = set(fresh)
        older = [(k, i) for k in sorted(usable) for i in range(len(labels[k])) if (k, i) not in chosen]
        room = max(0, self.replay - len(fresh))
        if len(older) > room:
            older = [older[j] for j in rng.choice(len(older), room, replace=False)]
        picked: dict[str, list[int]] = {}
        for k, i in [*fresh[: self.replay], *older]:
            picked.setdefault(k, []).append(i)
        groups = []
        for key in sorted(picked):
            order = rng.permutation(np.asarray(picked[key]))
            if len(order) < 2:
                continue
            for start in range(0, len(order), self.batch_size):
                groups.append((key, order[start : start + self.batch_size], labels[key]))
        batches, current, size = [], [], 0
        for group in groups:
            if current and size + len(group[1]) > self.batch_size:
                batches.append(self._batch(current))
                current, size = [], 0
            current.append(group)
            size += len(group[1])
        if current:
            batches.append(self._batch(current))
        return [b for b in batches if len(b["label"]) >= 2]

    def _batch(self, groups: list[tuple[str, np.ndarray, np.ndarray]]) -> dict[str, torch.Tensor]:
        stmt, gemm, tags, label, task = [], [], [], [], []
        for t, (key, index, labels) in enumerate(groups):
            data = self.data[key]
            stmt += [data["stmt"][i] for i in index]
            gemm += [data["gemm"][i] for i in index]
            tags.append(np.repeat(self.tags[key][None], len(index), axis=0))
            label.append(labels[index])
            task.append(np.full(len(index), t))
        return make_batch(stmt, np.concatenate(tags), np.stack(gemm), np.concatenate(label), np.concatenate(task))

    def save(self, path: str) -> None:
        """Write the mode, the network (`pruner_models.registry.net_state`, if any) and this run's
        records, atomically (torch.save of tensors and plain types; `load` reads it with weights_only)."""
        state = {
            "mode": self.mode,
            "rounds": self.rounds,
            "trained": self.trained,
            "net": None if self.net is None else registry.net_state(self.net),
            "tags": {k: torch.from_numpy(v) for k, v in self.tags.items()},
            "data": {
                k: {
                    "stmt": [torch.from_numpy(s) for s in d["stmt"]],
                    "gemm": [torch.from_numpy(g) for g in d["gemm"]],
                    "latency": torch.tensor(d["latency"], dtype=torch.float64),
                }
                for k, d in self.data.items()
            },
        }
        buffer = io.BytesIO()
        torch.save(state, buffer)
        atomic_write_bytes(path, buffer.getvalue())

    def load(self, path: str) -> None:
        """Restore what `save` wrote (the mode must match this model's).

        Raises:
            ValueError: a file that is not a saved PrunerCostModel, one saved in another mode, or one
                whose network holds non-finite weights (names the file and tensor).
        """
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:
            raise ValueError(f"{path}: cannot read a saved cost model ({type(err).__name__}: {err})") from None
        if not isinstance(state, dict) or "mode" not in state or "net" not in state:
            raise ValueError(f"{path}: not a saved PrunerCostModel")
        if state["mode"] != self.mode:
            raise ValueError(f"{path}: saved in mode {state['mode']!r}, this model runs mode {self.mode!r}")
        self.rounds, self.trained = int(state["rounds"]), bool(state["trained"])
        if state["net"] is not None:
            self.net = registry.build_net(state["net"], path).to(self.device).eval()
        self.tags = {k: v.numpy() for k, v in state["tags"].items()}
        self.data = {
            k: {
                "stmt": [s.numpy() for s in d["stmt"]],
                "gemm": [g.numpy() for g in d["gemm"]],
                "latency": d["latency"].tolist(),
            }
            for k, d in state["data"].items()
        }
