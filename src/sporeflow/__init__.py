"""sporeflow: Hydra-configured MindSpore experiments with two-stage dimension-reduce training.

Importing this package does not import MindSpore: the CPU instruction-set choice
(`runtime.cpu_isa`) must reach the environment before MindSpore's oneDNN loads.
"""

__version__ = "0.1.0"
