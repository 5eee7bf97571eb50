"""runtime.heap: the objects a job starts with are kept out of MindSpore's per-compile garbage
collections, and given back to the collector after the job (or, between the jobs of a sweep in
one process, at its end or once they have grown by a quarter)."""

from __future__ import annotations

import gc
import weakref

import numpy as np

from sporeflow.runtime import heap
from sporeflow.runtime.heap import long_lived_objects_frozen


class Node:
    def __init__(self):
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_mindspore_collects_garbage_before_compiling_a_graph():
    """The reason for the module: a full collection (generation 2) per compiled graph."""
    import mindspore as ms
    from mindspore import nn

    full = []

    def count(phase, info):
        if phase == "start" and info["generation"] == 2:
            full.append(1)

    ms.set_context(mode=ms.GRAPH_MODE)  # as every job runs (runtime.mindspore_context)
    net = nn.Dense(3, 2)
    gc.callbacks.append(count)
    try:
        net(ms.Tensor(np.ones((4, 3), np.float32)))
    finally:
        gc.callbacks.remove(count)
    assert full, "MindSpore compiled a graph without a full collection"


def test_a_job_frees_its_own_cycles_and_keeps_the_older_ones_until_it_ends():
    older = Node()
    older_ref = weakref.ref(older)
    with long_lived_objects_frozen():
        assert gc.get_freeze_count() > 0
        made_here = Node()
        made_ref = weakref.ref(made_here)
        del made_here, older
        gc.collect()
        assert made_ref() is None, "a cycle the job made is freed during the job"
        assert older_ref() is not None, "an object alive at the start is left alone"
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert older_ref() is None, "after the job the collector frees it as before"


def test_the_heap_is_given_back_when_the_job_fails():
    try:
        with long_lived_objects_frozen():
            raise RuntimeError("diverged")
    except RuntimeError:
        pass
    assert gc.get_freeze_count() == 0


def _frozen_around_next_start(keep_before: bool) -> tuple[int, int]:
    """Objects frozen after a job run with `keep=keep_before`, and once the next job started."""
    with long_lived_objects_frozen(keep=keep_before):
        pass
    frozen_before = gc.get_freeze_count()
    try:
        with long_lived_objects_frozen(keep=True):
            frozen_after = gc.get_freeze_count()
    finally:
        heap.release()
    return frozen_before, frozen_after


def test_a_sweeps_next_job_freezes_only_what_is_new():
    """keep=True: the objects stay frozen after the job, and the next job's start adds what
    survived since; without it everything went back (and a full collection is made again)."""
    kept_before, kept_after = _frozen_around_next_start(keep_before=True)
    assert kept_before > 0, "keep=True gave the objects back"
    assert kept_after >= kept_before
    released_before, _ = _frozen_around_next_start(keep_before=False)
    assert released_before == 0


def test_a_kept_heap_frees_a_finished_jobs_cycles_at_the_next_start_or_the_sweeps_end():
    with long_lived_objects_frozen(keep=True):
        made_in_job = Node()
    job_ref = weakref.ref(made_in_job)
    del made_in_job
    frozen_in_sweep = Node()  # alive at the next start: frozen with the rest
    frozen_ref = weakref.ref(frozen_in_sweep)
    with long_lived_objects_frozen(keep=True):
        assert job_ref() is None, "the next job's start freed the cycle the last job left"
        del frozen_in_sweep
        gc.collect()
        assert frozen_ref() is not None, "frozen: only a full collection may free it"
    heap.release()  # the sweep's end
    gc.collect()
    assert frozen_ref() is None


def test_frozen_objects_that_grew_by_a_quarter_get_a_full_collection(monkeypatch):
    with long_lived_objects_frozen(keep=True):
        pass
    cycle = Node()
    cycle_ref = weakref.ref(cycle)
    with long_lived_objects_frozen(keep=True):  # `cycle` is frozen now
        pass
    del cycle
    monkeypatch.setitem(heap._AFTER_FULL, "frozen", gc.get_freeze_count() / (heap.GROWTH * 1.01))
    try:
        with long_lived_objects_frozen(keep=True):
            assert cycle_ref() is None, "grown past GROWTH: the start collected everything"
    finally:
        heap.release()
