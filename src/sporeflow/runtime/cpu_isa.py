"""Choose the CPU instruction set oneDNN may use, before its first kernel runs.

MindSpore 2.10's CPU wheel bundles oneDNN 3.10. On AVX-512 machines (seen on AMD EPYC) that
oneDNN dispatches plain NCHW convolutions to a reference kernel: a LeNet-5 train step takes
~48 ms. Capped at AVX2 it picks a GEMM-based kernel: ~3.6 ms (bench/bench_cpu_isa.py).
oneDNN reads ONEDNN_MAX_CPU_ISA once, when it first dispatches (not when MindSpore is
imported), so it must be in the environment before the first graph runs; msrun workers
inherit it from the launcher.
"""

from __future__ import annotations

import logging
import os

from sporeflow.config.schema import CpuIsa

log = logging.getLogger(__name__)

CHOICES = tuple(choice.value for choice in CpuIsa)
ENV_VAR = "ONEDNN_MAX_CPU_ISA"


def cpu_flags() -> set[str]:
    """The CPU feature flags from /proc/cpuinfo (empty where that file does not exist)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def resolve(choice: str, flags: set[str] | None = None) -> str | None:
    """The ONEDNN_MAX_CPU_ISA value for a `runtime.cpu_isa` choice; None leaves oneDNN alone.

    `auto` rule: cap at AVX2 when the CPU has AVX-512 (where the slow reference conv kernel
    is picked) and AVX2 (so the cap is a real kernel, not a downgrade to SSE); otherwise
    leave oneDNN's own choice.
    """
    if choice not in CHOICES:
        raise ValueError(f"runtime.cpu_isa={choice!r}; allowed: {', '.join(CHOICES)}")
    if choice == "native":
        return None
    if choice != "auto":
        return choice
    flags = cpu_flags() if flags is None else flags
    if "avx512f" in flags and "avx2" in flags:
        return "AVX2"
    return None


def apply(choice: str) -> str | None:
    """Set ONEDNN_MAX_CPU_ISA for this process and its children; returns the value in force.

    With `auto`, a value the user exported wins; an explicit choice replaces it (`native`
    removes it, so oneDNN picks by itself). Importing MindSpore does not read it (set after
    the import it still caps: bench/bench_cpu_isa.py); a later job of the same process that
    asks for another value is told that the first one stays.
    """
    value = os.environ[ENV_VAR] if choice == "auto" and ENV_VAR in os.environ else resolve(choice)
    if _first_applied and _first_applied[0] != value:
        log.warning(
            "runtime.cpu_isa=%s asks for %s=%s, but oneDNN read its cap once in this process "
            "(%s, an earlier job's); a job in a new process gets it",
            choice,
            ENV_VAR,
            value,
            _first_applied[0] or "none",
        )
    _first_applied[:] = _first_applied or [value]
    if value is None:
        os.environ.pop(ENV_VAR, None)
    else:
        os.environ[ENV_VAR] = value
    return value


_first_applied: list[str | None] = []  # what this process's oneDNN reads when it first runs
