"""The oneDNN ISA rule, and that a run really applies it before MindSpore loads."""

from __future__ import annotations

import os

import pytest

from sporeflow.runtime import cpu_isa


def test_auto_caps_avx512_machines_at_avx2():
    assert cpu_isa.resolve("auto", {"avx2", "avx512f"}) == "AVX2"


def test_auto_leaves_other_machines_alone():
    assert cpu_isa.resolve("auto", {"avx2"}) is None
    assert cpu_isa.resolve("auto", set()) is None


def test_explicit_and_native():
    assert cpu_isa.resolve("AVX512_CORE", set()) == "AVX512_CORE"
    assert cpu_isa.resolve("native", {"avx512f", "avx2"}) is None


def test_unknown_choice_lists_allowed():
    with pytest.raises(ValueError, match="auto, AVX2, AVX512_CORE, native"):
        cpu_isa.resolve("sse9", set())


def test_apply_respects_exported_value_under_auto(monkeypatch):
    monkeypatch.setenv(cpu_isa.ENV_VAR, "AVX512_CORE")
    assert cpu_isa.apply("auto") == "AVX512_CORE"
    assert cpu_isa.apply("AVX2") == "AVX2"
    assert os.environ[cpu_isa.ENV_VAR] == "AVX2"
    assert cpu_isa.apply("native") is None
    assert cpu_isa.ENV_VAR not in os.environ
