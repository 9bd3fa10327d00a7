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

from data.atomic import atomic_write_bytes

__all__ = ["SafeXGBModel"]

_FORMAT = "pruner-lightning-xgb-state-1"


@derived_object
class SafeXGBModel(XGBModel._cls):  # TVM's derived_object forbids subclassing the decorated class itself
    """`XGBModel` whose `save` / `load` use the pickle-free format of the module docstring."""

    def save(self, path: str) -> None:
        """Write the booster and the cached features to `path` atomically."""
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
        self.data, self.data_size, self.booster = data, int(counts.sum()), booster
