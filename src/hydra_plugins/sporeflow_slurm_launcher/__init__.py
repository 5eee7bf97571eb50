"""sporeflow's SLURM launcher for Hydra: Hydra's submitit_slurm launcher that waits for every job
and names the ones SLURM ended (`cluster=slurm` sets it as `hydra.launcher._target_`)."""
