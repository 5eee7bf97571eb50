"""engine.compile_cache in this process: what a graph's description tells apart, what the check
before each compile keeps or deletes, and that a cached compile leaves the process alone. What a
later process loads is tests/e2e/test_compile_cache_across_processes.py."""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import logging
import os
import stat
import sys
import threading
import time
import tracemalloc

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn

from helpers.constant_nets import KINDS, Scaled
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


def _slot(tmp_path, name: str = "slot-0", version: str = "mindspore-test") -> compile_cache.Slot:
    """A slot of version folder `version` of the cache root tmp_path, as a process would claim
    it; every slot of the version folder shares its store."""
    graphs = tmp_path / version / name / "rank_0" / "graph_cache"
    graphs.mkdir(parents=True, exist_ok=True)
    compile_cache._clear(graphs)  # what the process before left there
    return compile_cache.Slot(tmp_path, graphs.parents[1], graphs, -1, graphs.parents[2] / "graphs")


def _compiled(slot: compile_cache.Slot, graph: str, data: bytes | None) -> bytes | None:
    """One compile at the slot's next index as MindSpore does it: it loads what was put there
    (returned) unless that is no graph (the empty file of a miss), when it compiles and writes
    `data` (None: the compile failed)."""
    index = slot.compiles
    compile_cache._before(slot, index, graph)
    slot.compiles += 1
    entry = slot.graphs / f"compile_cache_{index}.mindir"
    found = entry.read_bytes()
    if found:
        loaded: bytes | None = found
    else:
        if data is not None:
            entry.write_bytes(data)
        loaded = None
    compile_cache._after(slot, index, graph if data is not None else None)
    return loaded


def _stored(slot: compile_cache.Slot) -> dict[str, bytes]:
    """The store's entries: graph digest -> the graph file's bytes."""
    found = {}
    for meta in slot.store.glob(f"*/{compile_cache.ENTRY}"):
        (digest,) = json.loads(meta.read_text())["files"].values()
        found[meta.parent.name] = (meta.parent / digest).read_bytes()
    return found


def test_an_entry_is_found_by_content_after_other_graphs_took_its_index(tmp_path):
    """`train.py`, `train.py optimizer=adam`, `train.py` in one slot, then graph `a` at index 2
    of a process in another slot: each graph loads wherever its process compiles it."""
    first = _slot(tmp_path)
    assert _compiled(first, "a", b"graph a") is None  # a fresh cache: compiled, then stored
    assert _compiled(first, "b", b"graph b") is None
    assert _stored(first) == {"a": b"graph a", "b": b"graph b"}

    other = _slot(tmp_path)  # the next process in the slot: another graph first
    assert _compiled(other, "c", b"graph c") is None  # index 0, a miss
    assert _compiled(other, "a", b"unused") == b"graph a"  # index 1: a's entry put there
    assert other.loaded == 1

    again = _slot(tmp_path, "slot-1")  # a process in another slot, in another order
    assert _compiled(again, "b", b"unused") == b"graph b"
    assert _compiled(again, "c", b"unused") == b"graph c"
    assert _compiled(again, "a", b"unused") == b"graph a"
    assert again.loaded == 3
    assert sorted(p.name for p in again.graphs.iterdir()) == [
        "compile_cache_0.mindir",
        "compile_cache_1.mindir",
        "compile_cache_2.mindir",
    ]


def test_a_damaged_or_foreign_entry_is_compiled_again(tmp_path):
    slot = _slot(tmp_path)
    _compiled(slot, "a", b"graph a")
    _compiled(slot, "b", b"graph b")
    (stored,) = (p for p in (slot.store / "a").iterdir() if p.name != compile_cache.ENTRY)
    stored.chmod(0o600)
    stored.write_bytes(b"graph a, damaged")

    later = _slot(tmp_path, "slot-1")
    assert _compiled(later, "a", b"graph a") is None  # the damaged entry: compiled again
    assert _stored(later)["a"] == b"graph a"  # and stored again

    (slot.store / "b").rename(slot.store / "c")  # an entry under another graph's digest
    assert _compiled(later, "c", b"graph c") is None
    assert _stored(later)["c"] == b"graph c"

    meta = slot.store / "c" / compile_cache.ENTRY  # a file name that is a path
    recorded = json.loads(meta.read_text())
    meta.write_text(
        json.dumps(
            {
                "graph": "c",
                "files": {f"../../x_{name}": digest for name, digest in recorded["files"].items()},
                "sizes": {f"../../x_{name}": size for name, size in recorded["sizes"].items()},
            }
        )
    )
    assert _compiled(later, "c", b"graph c") is None
    assert not list(later.graphs.parents[1].glob("x_*"))

    (slot.store / "a" / compile_cache.ENTRY).write_text("{not json")
    assert _compiled(later, "a", b"graph a") is None
    assert later.loaded == 0 and _stored(later) == {"a": b"graph a", "c": b"graph c"}

    assert _compiled(later, "d", None) is None  # a compile that failed leaves nothing
    assert "d" not in _stored(later)
    assert not list(later.graphs.glob(f"compile_cache_{later.compiles - 1}.*"))


def test_the_size_bound_prunes_the_least_recently_used(tmp_path):
    import os

    slot = _slot(tmp_path)
    for age, graph in enumerate("abcd"):
        _compiled(slot, graph, graph.encode() * 1000)
        os.utime(slot.store / graph, (1e9 + age, 1e9 + age))  # a is the oldest, d the newest
    _compiled(_slot(tmp_path, "slot-1"), "a", b"unused")  # a used again: now the newest
    old_version = _slot(tmp_path, version="mindspore-old")  # another version's store counts too
    _compiled(old_version, "e", b"e" * 1000)
    os.utime(old_version.store / "e", (1e9 - 1, 1e9 - 1))
    entry_bytes = sum(p.stat().st_size for p in (slot.store / "b").iterdir())

    compile_cache._bound(tmp_path, 3 * entry_bytes)
    assert sorted(_stored(slot)) == ["a", "c", "d"]  # e and b were the least recently used
    assert not (old_version.store / "e").exists()

    slot.max_bytes = entry_bytes  # storing a graph keeps the store within the bound
    _compiled(slot, "f", b"f" * 1000)
    assert sorted(_stored(slot)) == ["f"]


def test_a_process_that_stores_a_graph_another_stored_meanwhile_keeps_the_first(tmp_path):
    """Two jobs compiling one graph at once both store it: the entry renamed into place first
    stays whole, the other is dropped."""
    one, two = _slot(tmp_path), _slot(tmp_path, "slot-1")
    compile_cache._before(one, 0, "a")
    compile_cache._before(two, 0, "a")
    (one.graphs / "compile_cache_0.mindir").write_bytes(b"graph a")
    (two.graphs / "compile_cache_0.mindir").write_bytes(b"graph a, written by two")
    compile_cache._after(one, 0, "a")
    compile_cache._after(two, 0, "a")
    assert _stored(one) == {"a": b"graph a"}
    assert [p.name for p in one.store.iterdir() if p.name.startswith(".")] == []


def _data_file(slot: compile_cache.Slot, graph: str):
    """The one graph file of `graph`'s store entry (named by its SHA-256)."""
    (found,) = (p for p in (slot.store / graph).iterdir() if p.name != compile_cache.ENTRY)
    return found


def _compiled_in_time(slot: compile_cache.Slot, graph: str, data: bytes, fifo) -> bytes | None:
    """`_compiled`, failing when it still waits after 10 s (then a writer opens `fifo` and
    leaves, so the waiting read ends and the test process is not left with it)."""
    done: dict[str, bytes | None] = {}
    worker = threading.Thread(target=lambda: done.update(loaded=_compiled(slot, graph, data)))
    worker.daemon = True
    worker.start()
    worker.join(10)
    try:
        assert not worker.is_alive(), "the compile waits for a writer of a FIFO in the store"
    finally:
        if worker.is_alive():
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            worker.join(10)
    return done["loaded"]


def test_an_entry_file_that_is_a_fifo_is_compiled_again_without_waiting(tmp_path, caplog):
    """A FIFO where an entry's graph file was: reading it waited for a writer forever (the job
    hung with no line); it is no regular file, so the entry is foreign: deleted, the graph
    compiled and stored again, said at info level."""
    slot = _slot(tmp_path)
    _compiled(slot, "a", b"graph a")
    fifo = _data_file(slot, "a")
    fifo.unlink()
    os.mkfifo(fifo)
    later = _slot(tmp_path, "slot-1")
    with caplog.at_level(logging.INFO, logger=compile_cache.__name__):
        assert _compiled_in_time(later, "a", b"graph a", fifo) is None
    assert f"entry a not used (file {fifo.name} is not a regular file); compiling" in caplog.text
    assert _stored(later) == {"a": b"graph a"}
    assert stat.S_ISREG(_data_file(later, "a").lstat().st_mode)


def test_an_entry_file_that_links_out_of_the_cache_is_not_followed(tmp_path, caplog):
    """A link in an entry, even to a file with the recorded bytes, is not the cache's file."""
    slot = _slot(tmp_path / "cache")
    _compiled(slot, "a", b"graph a")
    outside = tmp_path / "elsewhere"
    outside.write_bytes(b"graph a")
    link = _data_file(slot, "a")
    link.unlink()
    link.symlink_to(outside)
    later = _slot(tmp_path / "cache", "slot-1")
    with caplog.at_level(logging.INFO, logger=compile_cache.__name__):
        assert _compiled(later, "a", b"graph a") is None  # compiled again, not loaded
    assert f"entry a not used (file {link.name} is a link)" in caplog.text
    assert not _data_file(later, "a").is_symlink() and outside.read_bytes() == b"graph a"


@contextlib.contextmanager
def _peak():
    """The most memory Python allocated in the block (a list that holds it after the block)."""
    found: list[int] = []
    tracemalloc.start()
    try:
        yield found
        found.append(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("recorded", ["the size stored", "the size found"])
def test_an_oversized_entry_file_is_refused_before_it_is_read(tmp_path, recorded):
    """A graph file grown to 3 GB (sparse: no disk taken) was read whole before its digest was
    checked (peak RSS 3.7 GB); its size is checked against the entry's record and
    MAX_FILE_BYTES first, and nothing of it is read."""
    slot = _slot(tmp_path)
    _compiled(slot, "a", b"graph a")
    with _data_file(slot, "a").open("r+b") as grown:
        grown.truncate(3 * 2**30)
    if recorded == "the size found":  # an entry.json that records the 3 GB too
        meta = slot.store / "a" / compile_cache.ENTRY
        written = json.loads(meta.read_text())
        written["sizes"] = dict.fromkeys(written["files"], 3 * 2**30)
        meta.write_text(json.dumps(written))
    later = _slot(tmp_path, "slot-1")
    with _peak() as peak:
        assert _compiled(later, "a", b"graph a") is None
    assert peak[0] < 4 * 2**20, f"{peak[0]} bytes allocated to check an entry"
    assert _stored(later) == {"a": b"graph a"}


def test_a_large_entry_is_stored_and_loaded_in_bounded_memory(tmp_path):
    """A 48 MB graph file is copied and hashed in CHUNKs, into the store and out of it: it was
    read whole each way."""
    data = np.random.default_rng(0).bytes(48 * 2**20)
    slot, later = _slot(tmp_path), _slot(tmp_path, "slot-1")
    compile_cache._before(slot, 0, "a")
    (slot.graphs / "compile_cache_0.mindir").write_bytes(data)  # what MindSpore compiled
    with _peak() as stored:
        compile_cache._after(slot, 0, "a")
    with _peak() as loaded:
        compile_cache._before(later, 0, "a")
    assert (later.graphs / "compile_cache_0.mindir").read_bytes() == data
    assert max(stored + loaded) < 4 * 2**20, f"{stored + loaded} bytes: a whole copy was read"


def _leftover(store, name: str, age: float, size: int = 5000):
    """A folder of `size` bytes in `store`, left alone for `age` seconds."""
    folder = store / name
    folder.mkdir()
    (folder / ("0" * 64)).write_bytes(b"x" * size)
    os.utime(folder, (time.time() - age, time.time() - age))
    return folder


def test_leftovers_count_against_the_bound_and_go_once_nobody_holds_them(tmp_path):
    """What a killed job left of an entry it was storing (`.partial-*`) or deleting
    (`.deleted-*`) was neither counted against runtime.compile_cache_max_gb nor removed: it
    counts, and goes once no process holds it (a process holds one while it writes or deletes
    it) and it has been left alone for a minute (one just made may not be held yet)."""
    slot = _slot(tmp_path)
    _compiled(slot, "a", b"a" * 1000)
    entry_bytes = sum(p.stat().st_size for p in (slot.store / "a").iterdir())
    dead = [
        _leftover(slot.store, ".partial-x1y2", age=7200),
        _leftover(slot.store, f".deleted-b-{os.getpid()}-1", age=120),
    ]
    fresh = _leftover(slot.store, ".partial-just-made", age=0)
    held = _leftover(slot.store, ".deleted-c-1-2", age=7200)
    lock = os.open(held, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        compile_cache._bound(tmp_path, entry_bytes + 2 * 5000)  # a, fresh and held: it fits
        assert [p.exists() for p in dead] == [False, False]
        assert fresh.exists() and held.exists() and sorted(_stored(slot)) == ["a"]
        compile_cache._bound(tmp_path, entry_bytes + 2 * 5000 - 1)  # the leftovers count
        assert _stored(slot) == {} and fresh.exists() and held.exists()
    finally:
        os.close(lock)
    compile_cache._bound(tmp_path, 10**9)  # no longer held
    assert not held.exists() and fresh.exists()
    assert sorted(p.name for p in slot.store.iterdir()) == [".partial-just-made"]


def test_a_store_in_progress_is_held_until_its_entry_is_in_place(tmp_path, monkeypatch):
    """A job storing an entry holds its `.partial-*` folder: another job pruning meanwhile
    counts it and leaves it, however long the store takes."""
    slot = _slot(tmp_path)
    seen: list[bool] = []
    copied = compile_cache._copied

    def slow_copy(source, out, size):
        (partial,) = slot.store.glob(".partial-*")
        os.utime(partial, (1e9, 1e9))  # as if left alone for years
        compile_cache._bound(tmp_path, 10**9)
        seen.append(partial.exists())
        return copied(source, out, size)

    monkeypatch.setattr(compile_cache, "_copied", slow_copy)
    _compiled(slot, "a", b"graph a")
    monkeypatch.undo()
    assert seen == [True] and _stored(slot) == {"a": b"graph a"}


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
    assert any(slot.store.glob(f"*/{compile_cache.ENTRY}"))  # stored under its description


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


def test_a_compile_cache_bound_that_is_not_positive_is_refused_before_any_work(tmp_path):
    from helpers.inprocess import TINY, run_train_here

    proc = run_train_here([*TINY, "runtime.compile_cache_max_gb=0"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("Config error: runtime.compile_cache_max_gb"), line
    assert "> 0" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_a_description_tells_apart_two_values_of_a_constant_a_network_holds(kind):
    """Every value enters a graph's description by value (graph_pool.describe): a network
    holding np.float32(0) was described as one holding np.float32(1), and loaded its graph. A
    value with no description by value (a plain object) leaves the graph uncached."""

    def described(scale):
        return compile_cache.description(Scaled(kind, scale), _inputs(4, 3), {}, "predict.1")

    if kind == "object":
        assert described(1.0) is None
        return
    one = described(1.0)
    assert one is not None and described(1.0) == one  # another build of one value
    assert described(0.0) != one
