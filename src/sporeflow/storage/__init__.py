"""Storage layer: atomic files, checkpoints, run dirs claimed by one run, run markers and the
file lock. Everything another process or a later run reads is written here, crash-safe."""
