"""MetaSchedule's XGBoost cost model with a state file that cannot run code when loaded.

TVM's `XGBModel.save` writes a tar of the booster and an object array of the cached features, and
its `load` reads that array back with `np.load(..., allow_pickle=True)`: a crafted
`cost_model.xgb.bin` in a tuning dir someone sent you runs arbitrary code on resume. `SafeXGBModel`
keeps TVM's model (features, training, prediction) and replaces only save/load:

* the state is ONE `.npz` read with `allow_pickle=False`: numeric arrays and fixed-width strings only;
* the booster is stored as XGBoost's own UBJSON model bytes (`Booster.save_raw("ubj")`), a uint8
  array, and read back with `Booster.load_model(bytearray)`: data, not code;
* the feature groups are flattened: `hashes` (groups,), `group_records` (groups,) records per group,
  `record_rows` (records,) feature rows per record, `features` (rows, feature_dim) float32,
  `costs` (records,) float64.
* the keys of the schedules whose measurements `update` took (`seen`, as `PrunerCostModel` keeps
  them, for `bridge.catch_up`): `seen_groups` (groups,), `seen_counts` (groups,) keys per group,
  `seen_keys` (keys,) uint64. A state written before these arrays loads with `seen` None: which
  records it holds cannot be told, and a resume leaves it as it is.

A file that is not such an npz (a TVM tar, a pickle, anything else) is refused with a ValueError
naming the file, before any of its bytes is interpreted as Python objects.
"""

from __future__ import annotations

import io
import os
import zipfile
from collections import OrderedDict

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model.xgb_model import FeatureGroup, XGBModel
from tvm.s_tir.meta_schedule.utils import shash2hex

from data.atomic import atomic_write_bytes
from data.features import schedule_key

__all__ = ["SafeXGBModel"]

_FORMAT = "pruner-lightning-xgb-state-1"


@derived_object
class SafeXGBModel(XGBModel._cls):  # TVM's derived_object forbids subclassing the decorated class itself
    """`XGBModel` whose `save` / `load` use the pickle-free format of the module docstring, and which
    keeps the keys of the schedules it learned from, so that a resumed run catches it up with its
    database (`bridge.catch_up`): MetaSchedule saves it after each batch, and a kill between the
    batch's commit to the database and that save would otherwise cost it the batch."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # feature-group hash -> keys of the schedules `update` took; None: not known (a state from before)
        self.seen: dict[str, set[int]] | None = {}

    def update(self, context, candidates, results) -> None:
        """TVM's update, and the candidates' keys noted in `seen` (their feature group's)."""
        super().update(context, candidates, results)
        if candidates and self.seen is not None:
            self.seen.setdefault(shash2hex(context.mod), set()).update(schedule_key(c.sch.mod) for c in candidates)

    def seen_in(self, context) -> set[int] | None:
        """The keys of the task's schedules whose measurements `update` took (None: not known)."""
        return None if self.seen is None else set(self.seen.get(shash2hex(context.mod), ()))

    def save(self, path: str) -> None:
        """Write the booster, the cached features and the seen keys to `path` atomically."""
        groups = list(self.data.values())
        features = [np.asarray(f, dtype=np.float32) for g in groups for f in g.features]
        dim = features[0].shape[1] if features else 0
        arrays = {
            "format": np.array(_FORMAT),
            "hashes": np.array([str(g.group_hash) for g in groups], dtype=str),
            "group_records": np.array([len(g.costs) for g in groups], dtype=np.int64),
            "record_rows": np.array([len(f) for f in features], dtype=np.int64),
            "features": np.concatenate(features) if features else np.zeros((0, dim), np.float32),
            "costs": np.concatenate([np.asarray(g.costs, np.float64) for g in groups])
            if groups
            else np.zeros(0, np.float64),
            "booster": np.frombuffer(bytes(self.booster.save_raw("ubj")), dtype=np.uint8)
            if self.booster is not None
            else np.zeros(0, np.uint8),
        }
        if self.seen is not None:
            seen = list(self.seen.items())
            arrays["seen_groups"] = np.array([g for g, _ in seen], dtype=str)
            arrays["seen_counts"] = np.array([len(keys) for _, keys in seen], dtype=np.int64)
            arrays["seen_keys"] = np.array([k for _, keys in seen for k in sorted(keys)], dtype=np.uint64)
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        atomic_write_bytes(path, buffer.getvalue())

    def load(self, path: str) -> None:
        """Restore what `save` wrote.

        Raises:
            ValueError: not a state written by `save` (e.g. TVM's own tar format, a pickle), or an
                inconsistent one; the message names the file.
        """
        import xgboost as xgb

        path = os.fspath(path)
        if not zipfile.is_zipfile(path):
            raise ValueError(
                f"{path}: not a pickle-free XGBoost state (written by bridge.xgb.SafeXGBModel); refusing to load "
                "it (TVM's own format unpickles arbitrary objects). Delete it to start the cost model afresh"
            )
        try:
            with np.load(path, allow_pickle=False) as f:
                arrays = {k: f[k] for k in f.files}
            if str(arrays.get("format")) != _FORMAT:
                raise ValueError(f"format {arrays.get('format')!r}, expected {_FORMAT!r}")
            rows, counts, costs = arrays["record_rows"], arrays["group_records"], arrays["costs"]
            if rows.sum() != len(arrays["features"]) or not counts.sum() == len(costs) == len(rows):
                raise ValueError("array lengths disagree")
            seen = None
            if "seen_keys" in arrays:
                keys, seen_counts = arrays["seen_keys"], arrays["seen_counts"]
                if seen_counts.sum() != len(keys) or len(seen_counts) != len(arrays["seen_groups"]):
                    raise ValueError("seen key lengths disagree")
                bounds = np.cumsum(seen_counts)[:-1]
                seen = {
                    str(g): {int(k) for k in part} for g, part in zip(arrays["seen_groups"], np.split(keys, bounds))
                }
        except (KeyError, ValueError, OSError, zipfile.BadZipFile) as err:
            raise ValueError(f"{path}: not a usable XGBoost state ({type(err).__name__}: {err})") from None
        features = np.split(arrays["features"], np.cumsum(rows)[:-1]) if len(rows) else []
        data: OrderedDict[str, FeatureGroup] = OrderedDict()
        start = 0
        for group_hash, count in zip(arrays["hashes"], counts):
            end = start + int(count)
            data[str(group_hash)] = FeatureGroup(str(group_hash), list(features[start:end]), costs[start:end])
            start = end
        booster = None
        if len(arrays["booster"]):
            booster = xgb.Booster()
            try:
                booster.load_model(bytearray(arrays["booster"].tobytes()))
            except xgb.core.XGBoostError as err:
                raise ValueError(f"{path}: the XGBoost model does not load ({err})") from None
        self.data, self.data_size, self.booster, self.seen = data, int(counts.sum()), booster, seen
