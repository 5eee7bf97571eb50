"""engine.compile_cache in this process: what a graph's description tells apart, what the check
before each compile keeps or deletes, and that a cached compile leaves the process alone. What a
later process loads is tests/e2e/test_compile_cache_across_processes.py."""

from __future__ import annotations

import contextlib
import io
import json
import sys

import mindspore as ms
import numpy as np
from mindspore import nn

from helpers.mindspore_setup import graph_mode_on_cpu
from sporeflow.engine import compile_cache


def _inputs(*shape):
    return (ms.Tensor(np.ones(shape, np.float32)),)


def test_a_description_tells_graphs_apart_and_not_two_builds_of_one():
    def described(cell, inputs):
        return compile_cache.description(cell, inputs, {}, "train.123.456.0")

    one = described(nn.Dense(3, 2), _inputs(4, 3))
    assert one is not None
    assert described(nn.Dense(3, 2), _inputs(4, 3)) == one  # other weights, other instance
    assert described(nn.Dense(3, 2), _inputs(8, 3)) != one  # another input shape
    assert described(nn.Dense(3, 2, has_bias=False), _inputs(4, 3)) != one
    assert described(nn.ReLU(), _inputs(4, 3)) != described(nn.Tanh(), _inputs(4, 3))
    assert compile_cache.description(nn.Dense(3, 2), _inputs(4, 3), {}, "eval.1.2") != one
    assert compile_cache.description(lambda x: x, _inputs(4, 3), {}, "train") is None
    assert described(nn.Dropout(p=0.5), _inputs(4, 3)) is None  # a random operator


def _slot(tmp_path) -> compile_cache.Slot:
    graphs = tmp_path / "rank_0" / "graph_cache"
    graphs.mkdir(parents=True)
    return compile_cache.Slot(tmp_path, tmp_path, graphs, lock=-1)


def test_an_entry_is_left_to_load_only_for_its_graph_and_unchanged_files(tmp_path):
    slot = _slot(tmp_path)
    entry = slot.graphs / "compile_cache_3.mindir"
    other = slot.graphs / "compile_cache_31.mindir"  # another index's file is never touched
    entry.write_bytes(b"graph three")
    other.write_bytes(b"graph thirty-one")
    compile_cache._after(slot, 3, "graph-a")
    assert json.loads((slot.graphs / compile_cache.MANIFEST).read_text())["3"]["graph"] == "graph-a"

    compile_cache._before(slot, 3, "graph-a")  # the same graph, the same bytes: kept
    assert entry.exists() and 3 in slot.offered
    compile_cache._after(slot, 3, "graph-a")
    assert slot.loaded == 1

    entry.write_bytes(b"graph three, damaged")
    compile_cache._before(slot, 3, "graph-a")  # changed since it was written: deleted
    assert not entry.exists() and "3" not in slot.entries

    entry.write_bytes(b"graph three")
    compile_cache._after(slot, 3, "graph-a")
    compile_cache._before(slot, 3, "graph-b")  # written for another graph: deleted
    assert not entry.exists()

    entry.write_bytes(b"half a graph")
    compile_cache._after(slot, 3, None)  # a compile that failed leaves nothing
    assert not entry.exists() and other.exists()


def test_a_cached_compile_leaves_the_processes_streams_alone(tmp_path, monkeypatch):
    """MindSpore walks the entry script's imports at each cached compile, and making a module
    object of `sys` resets the live one's streams: with an entry script that imports sys (a
    notebook's kernel, a script calling sporeflow.run), a redirected stderr was lost."""
    from mindspore.graph import api

    entry = tmp_path / "entry.py"
    entry.write_text("import sys\n")
    monkeypatch.setattr(api, "entry_script_path", str(entry))
    graph_mode_on_cpu()
    assert compile_cache.use(True) is not None
    stream = io.StringIO()
    with contextlib.redirect_stderr(stream):
        assert nn.ReLU()(_inputs(2)[0]).asnumpy().tolist() == [1.0, 1.0]
        assert sys.stderr is stream


def _triple(t):
    return t * 3


def test_graphs_not_kept_are_compiled_with_the_cache_off_and_take_no_index(monkeypatch):
    """A function's graph, and a graph whose weights exceed MAX_ENTRY_BYTES, are compiled with
    MindSpore's cache off: no entry written, no compile index taken (an index without an entry
    would end MindSpore's reading of the cache for the rest of the process)."""
    graph_mode_on_cpu()
    slot = compile_cache.use(True)
    assert slot is not None
    x = _inputs(2)[0]
    before = compile_cache.counts()
    assert ms.jit(_triple)(x).asnumpy().tolist() == [3.0, 3.0]
    monkeypatch.setattr(compile_cache, "MAX_ENTRY_BYTES", 4 * 2 * 3 - 1)  # nn.Dense(3, 2)'s weight
    assert nn.Dense(3, 2, has_bias=False)(_inputs(1, 3)[0]).shape == (1, 2)
    assert compile_cache.counts() == before
    assert ms.get_context("enable_compile_cache")  # switched on again after each
    assert nn.Softsign()(x).asnumpy().tolist() == [0.5, 0.5]
    assert compile_cache.counts()[0] == before[0] + 1
    files = sorted(p.name for p in slot.graphs.glob("compile_cache_*.mindir"))
    assert f"compile_cache_{before[0]}.mindir" in files


def test_old_version_folders_are_pruned_unless_a_process_holds_one(tmp_path):
    import fcntl
    import os

    folders = []
    for age in range(6):  # version-0 is the newest
        folder = tmp_path / f"version-{age}"
        (folder / "slot-0").mkdir(parents=True)
        (folder / "slot-0" / "rank_0.lock").touch()
        os.utime(folder, (1e9 - age * 1000, 1e9 - age * 1000))
        folders.append(folder)
    held = os.open(folders[5] / "slot-0" / "rank_0.lock", os.O_RDWR)
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        compile_cache._prune(tmp_path, keep=folders[4])
    finally:
        os.close(held)
    left = sorted(p.name for p in tmp_path.iterdir())
    # the one in use, the 2 most recent others, and the oldest (a process holds it)
    assert left == ["version-0", "version-1", "version-4", "version-5"]


def test_a_compile_cache_dir_that_cannot_be_written_is_refused_before_any_work(tmp_path):
    from helpers.inprocess import TINY, run_train_here

    taken = tmp_path / "a_file"
    taken.write_text("not a folder")
    proc = run_train_here([*TINY, f"runtime.compile_cache_dir={taken}/cache"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"Config error: runtime.compile_cache_dir={taken}/cache: cannot write")
    assert "runtime.compile_cache=false" in line
    assert not (tmp_path / "run").exists()
