"""sporeflow's Optuna sweeper for Hydra: `hydra/sweeper=sporeflow_optuna` (Optuna 5 ask/tell)."""
