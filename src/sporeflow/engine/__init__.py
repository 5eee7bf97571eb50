"""Engine layer: the training loop, its callbacks and event record, and the custom train-step
cells. Gets built parts and callbacks: no config, Hydra or MLflow, so it is tested alone."""
