"""runtime.heap: the objects a job starts with are kept out of MindSpore's per-compile garbage
collections, and given back to the collector after the job."""

from __future__ import annotations

import gc
import weakref

import numpy as np

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
