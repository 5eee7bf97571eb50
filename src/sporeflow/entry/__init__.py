"""Entry layer: the Hydra task and exit codes (app), the words of a refusal (messages), Hydra's
registrations (hydra_setup), the `sporeflow` command (cli) and a sweep's MLflow parent run
(sweep_run). The only layer that sees Hydra's app machinery; may import every layer."""
