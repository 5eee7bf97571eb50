"""The oneDNN ISA rule, and that a run really applies it before its first kernel."""

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
    monkeypatch.setattr(cpu_isa, "_first_applied", [])
    monkeypatch.setenv(cpu_isa.ENV_VAR, "AVX512_CORE")
    assert cpu_isa.apply("auto") == "AVX512_CORE"
    assert cpu_isa.apply("AVX2") == "AVX2"
    assert os.environ[cpu_isa.ENV_VAR] == "AVX2"
    assert cpu_isa.apply("native") is None
    assert cpu_isa.ENV_VAR not in os.environ


def test_a_later_job_asking_for_another_cap_is_told_the_first_stays(monkeypatch, caplog):
    """oneDNN reads the cap once per process: the first job's value is applied in silence
    (MindSpore imported already is no reason to warn), a later job asking for another is told."""
    monkeypatch.delenv(cpu_isa.ENV_VAR, raising=False)
    monkeypatch.setattr(cpu_isa, "_first_applied", [])
    import mindspore  # noqa: F401 - imported before, as train.py has it

    with caplog.at_level("WARNING", logger=cpu_isa.__name__):
        assert cpu_isa.apply("AVX2") == "AVX2"
        assert cpu_isa.apply("AVX2") == "AVX2"
        assert caplog.records == []
        assert cpu_isa.apply("native") is None
    (said,) = [r.getMessage() for r in caplog.records]
    assert "runtime.cpu_isa=native asks for ONEDNN_MAX_CPU_ISA=None" in said
    assert "(AVX2, an earlier job's)" in said
