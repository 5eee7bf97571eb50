"""The job layer: what `python train.py` runs once its config is valid - the job's plan, inputs
checked up front, the pipelines that order stages, each stage's MLflow run and its end status,
reuse by fingerprint and finished jobs. It builds stages from `sporeflow.stage` and never the
other way round; it receives a validated plain config and never imports Hydra.

Importing this package imports nothing: `job.runs` (the launcher's MLflow hooks) loads no
MindSpore (tests/unit/test_architecture.py checks it); `job.pipeline` is the entry to training."""
