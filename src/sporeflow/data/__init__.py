"""Data sets: one module per on-disk format, all sharing the transform/batch pipeline in base.py."""
