"""The bridge between our cost models and TVM MetaSchedule tuning runs.

* `tvm_env`: the one place that imports and configures TVM (threads, intrinsics, builders).
* `bridge.export`: train.py checkpoint -> self-contained artifact (torch.load + our nn.Module).
* `bridge.cost_model.PrunerCostModel`: PAM / MoA / TenSet MLP as a MetaSchedule cost model, in the
  tuning modes pam, pam-siamese-update, pam-no-update, mlp, mlp-no-update.
* `bridge.psa`: PSA, the analytic draft model, its device table and `PSACostModel`.
* `bridge.search`: the resumable strategy frame and `ResumableEvolutionarySearch` (MetaSchedule's
  default); `bridge.draft_verify.DraftVerifySearch` (PSA drafts, the cost model verifies);
  `bridge.pipeline` (the next round searched and built while the current one runs);
  `bridge.search_log.SearchLog` (per-round statistics and the tuning curve).

Submodules are imported explicitly (`from bridge.psa import ...`): importing `bridge` alone loads
neither TVM nor torch.
"""
