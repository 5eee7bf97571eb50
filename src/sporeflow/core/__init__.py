"""Core layer: errors, the run context, signals, processes and ranges - plain Python that every
other layer may import. Imports nothing of sporeflow's and no MindSpore, MLflow or Hydra."""
