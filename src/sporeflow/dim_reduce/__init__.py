"""Dimension-reduce training (MindSpore boost `dim_reduce`, seed 000): stage-1 snapshots,
streaming PCA of them, and the stage-2 cell that steps in the PCA subspace."""
