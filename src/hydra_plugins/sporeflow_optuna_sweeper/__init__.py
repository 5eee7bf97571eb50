"""sporeflow's Optuna sweeper for Hydra: `hydra/sweeper=sporeflow_optuna` (optuna 4 ask/tell)."""
