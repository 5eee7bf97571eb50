"""The orchestration layer: which stages a run has, what each builds, their MLflow runs, reuse,
comparison. Receives a validated plain config; never imports Hydra's app machinery.

Importing this package imports nothing: `stages.runs` (the launcher's MLflow hooks) stays free
of MindSpore; `stages.pipeline` is the entry to training."""
