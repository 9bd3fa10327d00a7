"""Shapes and version of the feature schema, shared by the featurizer, the shards, the models and
the exported artifacts. Import-light on purpose: no TVM, no torch."""

SCHEMA_VERSION = 2
"""Version of the shards: bump when any feature definition or shard layout changes; readers refuse
other versions. (2: PSA rows gained column 11.)"""

MODEL_SCHEMA_VERSION = 1
"""Version of the features the models read (statement rows and tags, access records, the GEMM
matrix); checkpoints and exported artifacts carry it and loaders refuse others. PSA rows are no
model's input, so a PSA change bumps `SCHEMA_VERSION` alone and trained models stay valid."""

STMT_DIM = 164
"""MetaSchedule PerStoreFeature row width (buffers_per_store=5, 10 curve samples)."""
TAG_DIM = 10
"""Workload tags appended to every statement row: max, min, add, conv2d, winograd, depthwise,
dense/matmul, softmax, batch_matmul, reserved."""
ROW_DIM = STMT_DIM + TAG_DIM
ACCESS_DIM = 23
"""Per-access record width (docs/pruner.md section 1.1)."""
GEMM_ROWS = 8
"""Length of the GEMM needle '20101112': the GEMM matrix is GEMM_ROWS x ACCESS_DIM."""
PSA_DIM = 12
"""PSA row width (docs/pruner.md section 4.1)."""

TAG_NAMES = ("max", "min", "add", "conv2d", "winograd", "depthwise", "dense", "softmax", "batch_matmul", "reserved")
