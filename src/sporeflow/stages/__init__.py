"""Stages layer: which stages a run has, what each builds, their MLflow runs, reuse by
fingerprint, inputs checked up front. Receives a validated plain config; never imports Hydra.

Importing this package imports nothing: `stages.runs` (the launcher's MLflow hooks) loads no
MindSpore (tests/unit/test_architecture.py checks it); `stages.pipeline` is the entry to training."""
