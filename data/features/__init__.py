"""Per-program features of a scheduled TIR module: what PAM, the TenSet MLP and PSA read.

From ONE lowering of a scheduled module (MetaSchedule's PerStoreFeature pass list) the package
computes the 23-wide per-access records and their scope-digit string, the GEMM matrix found at the
needle '20101112', and the 11-wide PSA rows; `workload_tags` gives the 10 tags of a workload. The
164-wide statement rows come from MetaSchedule's own PerStoreFeature (C++, parallel), never
re-implemented. `featurize_candidates` is the one entry point for candidates.

Modules, bottom up:
    arith      interval and modular arithmetic of compiled expressions (TVM's analyzer, mirrored)
    graph      the JSON graph of a lowered module and its compiled expressions
    lowering   the PerStoreFeature pass list and MetaSchedule's PerStoreFeature rows
    access     the access and reuse walker (PerStoreFeature's group 2, per access)
    gemm       the GEMM pattern ("missing GEMM -> zeros" lives here)
    psa_rows   PSA's 11 numbers per stored buffer
    program    `ProgramFeatures`, column names
    walk       one walk of a lowered program -> access records, GEMM, PSA rows
    tags       workload tags
    extract    `featurize_candidates`, the entry point
    pool       `WalkPool`, the walk on worker processes
    cache      `FeatureCache`, each schedule featurized once per tuning run, whoever asks
"""

from data.features.cache import FeatureCache, schedule_key, schedule_keys
from data.features.extract import featurize_candidates
from data.features.gemm import GEMM_NEEDLE, find_gemm, no_gemm
from data.features.lowering import lower_for_features, per_store_rows
from data.features.pool import WalkPool, default_walk_workers
from data.features.program import ACCESS_COLUMNS, PSA_COLUMNS, ProgramFeatures, slog
from data.features.tags import workload_tags
from data.features.walk import walk_features

__all__ = [
    "ACCESS_COLUMNS",
    "FeatureCache",
    "GEMM_NEEDLE",
    "PSA_COLUMNS",
    "ProgramFeatures",
    "WalkPool",
    "default_walk_workers",
    "featurize_candidates",
    "find_gemm",
    "lower_for_features",
    "no_gemm",
    "per_store_rows",
    "schedule_key",
    "schedule_keys",
    "slog",
    "walk_features",
    "workload_tags",
]
