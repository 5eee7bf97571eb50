"""sporeflow's race sweeper for Hydra: `hydra/sweeper=sporeflow_race` (F-race over a grid)."""
