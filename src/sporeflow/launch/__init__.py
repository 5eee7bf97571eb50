"""Launch layer: re-running a job under msrun (one launcher per node), following rank 0's log,
and a node's place in a SLURM job. Knows nothing of tracking or MindSpore."""
