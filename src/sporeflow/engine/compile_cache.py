"""MindSpore's compile cache across processes, with entries kept by what the graph is.

MindSpore 2.10 finds a cached graph by the process's compile index alone (`compile_cache_<i>
.mindir`, `i` counting the compiles since the cache was switched on) and by a hash of the entry
script's own imports: a process that compiles other graphs, or the same graphs in another order,
is handed an earlier process's graph (tests/e2e/test_mindspore_compile_cache.py). Here every
compile passes through a wrapper around MindSpore's two graph executors' `compile`: the graph
about to be compiled is described (`graph_pool.cell_key`: every cell's class and constants,
parameter names, shapes and dtypes; the source file of every cell class; the input shapes and
dtypes; the phase kind, jit config and parallel context), and

- after MindSpore compiled and wrote a graph, its files are stored under the description's
  digest in the folder's content store (`graphs/<digest>/`: the files named by their SHA-256,
  and `entry.json` with the description digest and each file's name pattern and SHA-256);
- before a compile, when the store holds an entry for this description, its files are read,
  checked against their SHA-256 and the entry's description, and written at the names MindSpore
  looks for at this process's next compile index: a graph any earlier job compiled loads, in
  whatever order and slot. A damaged or foreign entry is deleted from the store, and the graph
  compiled and stored again.

MindSpore stops reading its cache for the rest of a process at the first index whose file is
missing (a flag it keeps per process; a missing dependency-hash file does the same), but not at
a file it cannot parse: it compiles that graph, writes it over the file, and loads later
indexes (measured: tests/e2e/test_compile_cache_across_processes.py, docs/sweeps.md). So a
graph the store lacks is given an empty file at its index, and a slot is given the store's
copy of MindSpore's `compile_dependency.hash` before its first compile: a process that
compiles a new graph first still loads the known ones after it.

A graph that cannot be described (a function's, one with a random operator, or one holding a
value that graph_pool.describe cannot describe by value: never reduced to its type), or whose
weights and constants exceed MAX_ENTRY_BYTES (MindSpore writes them into the entry), is compiled
with the cache off. The store is bounded (`runtime.compile_cache_max_gb`): after each stored
entry, the least recently used entries of the whole cache root are deleted until it fits.

The cache folder is `<root>/<mindspore version, device, sporeflow source digest>/`: MindSpore
fixes a process's folder at its first compile and numbers entries per process, so each process
compiles in a slot of its own (`slot-<n>`, an flock per slot and rank, only the files of the
process's own compiles); with every slot taken a process compiles without the cache. Every
process shares the store: an entry appears by an atomic rename of a finished folder, and is
deleted by a rename first, so a reader sees a whole entry or none. Version folders beyond the
3 most recently used are deleted when no process holds them.
"""

from __future__ import annotations

import atexit
import fcntl
import functools
import hashlib
import inspect
import json
import logging
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mindspore as ms
from mindspore import Parameter, Tensor, nn
from mindspore._c_expression import GraphExecutor_, JitExecutor_

from sporeflow.core.errors import ConfigError
from sporeflow.engine import graph_pool
from sporeflow.storage.cache import user_cache_dir

MAX_ENTRY_BYTES = 256 * 2**20  # a graph whose weights and constants are larger is not kept
KEEP_VERSIONS = 3  # version folders kept in a cache root (the one in use among them)
SLOTS = 8  # processes that can cache at once in one folder (a sweep's workers, a job's ranks)
STORE = "graphs"  # the content store in a version folder: <digest>/ per graph
ENTRY = "entry.json"  # in an entry's folder: the graph's digest, its files' names and SHA-256
DEPENDENCY_HASH = "compile_dependency.hash"  # MindSpore's hash of the entry script's imports
DEFAULT_MAX_GB = 10.0  # runtime.compile_cache_max_gb's default
log = logging.getLogger(__name__)


@dataclass
class Slot:
    """The cache folder this process owns, and what it has found in it."""

    root: Path  # what the job asked for
    folder: Path  # MindSpore's compile_cache_path
    graphs: Path  # where MindSpore writes this rank's entries
    lock: int  # the flock held for the life of the process
    store: Path  # the content store shared by every process of the version folder
    max_bytes: int = int(DEFAULT_MAX_GB * 2**30)  # the bound on the cache root's stored entries
    on: bool = True
    compiles: int = 0  # MindSpore compiles since the cache was switched on
    loaded: int = 0  # entries MindSpore loaded instead of compiling
    offered: dict[int, dict[str, tuple[int, int]]] = field(default_factory=dict)  # index -> mtimes
    placed: dict[int, Path] = field(default_factory=dict)  # index -> the store entry offered


_SLOT: Slot | None = None


def use(
    enabled: bool,
    folder: str | Path | None = None,
    rank: int = 0,
    max_gb: float | None = None,
) -> Slot | None:
    """Switch the checked cache on (`enabled`) in `folder` (None: `default_root()`) or off for
    this process's later compiles, its store bounded to `max_gb` (None: the bound in use, at
    first DEFAULT_MAX_GB); the slot in use, or None. A process caches in one folder: MindSpore
    fixes it at the process's first compile, so another `folder` later is a ConfigError (a job
    without one uses the process's)."""
    global _SLOT
    root = Path(folder).expanduser().resolve() if folder else None
    if _SLOT is not None:
        if enabled and root is not None and root != _SLOT.root:
            raise ConfigError(
                f"runtime.compile_cache_dir={root}: this process already caches compiled "
                f"graphs in {_SLOT.root} (MindSpore fixes the folder once per process); give "
                "every job of a sweep the same runtime.compile_cache_dir"
            )
        _SLOT.on = enabled
        if max_gb is not None:
            _SLOT.max_bytes = _bytes(max_gb)
        _switch(enabled, _SLOT.folder)
        return _SLOT if enabled else None
    if not enabled:
        return None
    try:
        root = root or default_root()
        _SLOT = _claim(root / _version_folder(), root, rank)
        _prune(root, keep=_SLOT.folder.parent if _SLOT else None)
        if _SLOT is not None:
            _SLOT.max_bytes = _bytes(DEFAULT_MAX_GB if max_gb is None else max_gb)
            _bound(root, _SLOT.max_bytes)
    except OSError as ex:  # a full or read-only disk: the job runs, only without the cache
        log.warning("compile cache: %s; compiling without it", ex)
        if _SLOT is not None:
            os.close(_SLOT.lock)
            _SLOT = None
        return None
    if _SLOT is None:
        log.warning(
            "compile cache: all %d slots of %s are in use; compiling without it", SLOTS, root
        )
        return None
    atexit.register(_clear, _SLOT.graphs)  # every entry is in the store
    _install()
    _switch(True, _SLOT.folder)
    return _SLOT


def _bytes(gb: float) -> int:
    return int(gb * 2**30)


def _entry_script_without_imports() -> None:
    """MindSpore hashes the entry script (sys.argv[0]) and what it imports at every cached
    compile: it fails when that is not a file (`python -c`, a test worker), and an entry that
    imports `sys` has the live sys module's streams reset (engine/mindspore_cache_entry.py).
    It hashes a file without imports instead: the store's check, not that hash, decides what
    is loaded, and the folder is keyed by sporeflow's source."""
    from mindspore.graph import api

    api.entry_script_path = str(Path(__file__).with_name("mindspore_cache_entry.py"))


def _claim(versioned: Path, root: Path, rank: int) -> Slot | None:
    """The first slot of `versioned` no other process holds for `rank`, locked."""
    for n in range(SLOTS):
        folder = versioned / f"slot-{n}"
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(folder / f"rank_{rank}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        graphs = folder / f"rank_{rank}" / "graph_cache"
        _clear(graphs)
        return Slot(root, folder, graphs, fd, versioned / STORE)
    return None


def _clear(graphs: Path) -> None:
    """Delete the graph files an earlier process left in the slot (every one is in the store)."""
    if graphs.is_dir():
        for path in graphs.iterdir():
            if path.name.startswith(("compile_cache_", "group_")):
                path.unlink(missing_ok=True)


def _prune(root: Path, keep: Path | None) -> None:
    """Delete the version folders of `root` beyond the KEEP_VERSIONS most recently used (each
    edit or upgrade of sporeflow or MindSpore starts one), except any a process still holds."""
    if keep is not None:
        os.utime(keep)
    folders = sorted(
        (p for p in root.iterdir() if p.is_dir() and p != keep),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for folder in folders[KEEP_VERSIONS - 1 :]:
        if not any(_held(lock) for lock in folder.glob("slot-*/rank_*.lock")):
            shutil.rmtree(folder, ignore_errors=True)


def _held(lock: Path) -> bool:
    """Whether a process holds `lock` (an flock test that takes and releases it when free)."""
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _switch(on: bool, folder: Path) -> None:
    """MindSpore's cache on (in `folder`) or off; its notice that the context key is deprecated
    in favour of an environment variable is silenced (a variable would reach child processes)."""
    if on:
        _entry_script_without_imports()
    logging.disable(logging.WARNING)
    try:
        ms.set_context(enable_compile_cache=on, compile_cache_path=str(folder))
    finally:
        logging.disable(logging.NOTSET)


def _version_folder() -> str:
    """What every cached graph depends on beyond its description: MindSpore, the device, the
    Python version, and sporeflow's own source (the code a cell's `construct` calls)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    device = ms.get_context("device_target")
    return f"mindspore-{ms.__version__}-{device}-py{version}-{_source_digest()[:16]}"


@functools.cache
def _source_digest() -> str:
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@functools.cache
def _file_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _install() -> None:
    """Route both of MindSpore's graph executors' compiles (cells, and `ms.jit` functions,
    which take compile indexes too) through `_checked`, once per process."""
    for executor in (GraphExecutor_, JitExecutor_):
        if not getattr(executor.compile, "sporeflow_checked", False):
            executor.compile = _checked(executor.compile)


def _checked(compile_graph):
    def checked_compile(executor, source, args, kwargs, phase, *rest):
        slot = _SLOT
        if slot is None or not slot.on:
            return compile_graph(executor, source, args, kwargs, phase, *rest)
        graph = description(source, args, kwargs, phase, rest) if _small(source) else None
        if graph is None:
            return _uncached(slot, compile_graph, executor, source, args, kwargs, phase, *rest)
        index = slot.compiles
        try:
            _before(slot, index, graph)
        except OSError as ex:  # an entry that could not be checked is never offered
            log.warning("compile cache: %s; compiling this graph without it", ex)
            return _uncached(slot, compile_graph, executor, source, args, kwargs, phase, *rest)
        slot.compiles += 1
        compiled = False
        try:
            compiled = compile_graph(executor, source, args, kwargs, phase, *rest)
            return compiled
        finally:
            _recorded(slot, index, graph if compiled else None)

    checked_compile.sporeflow_checked = True  # type: ignore[attr-defined]
    return checked_compile


def _recorded(slot: Slot, index: int, graph: str | None) -> None:
    """`_after`, never failing the compile: a graph not stored is compiled again by a later
    process."""
    try:
        _after(slot, index, graph)
    except OSError as ex:
        log.warning("compile cache: %s; entry %d not recorded", ex, index)


def _uncached(slot: Slot, compile_graph, *call):
    """Compile with MindSpore's cache off: it neither writes the graph nor takes a compile index
    (an index without an entry would end its reading of the cache for the process)."""
    _switch(False, slot.folder)
    try:
        return compile_graph(*call)
    finally:
        _switch(True, slot.folder)


def _small(source: Any) -> bool:
    """Whether MindSpore's entry for `source` stays under MAX_ENTRY_BYTES: it writes every
    parameter's and Tensor constant's data into the entry (stage 2's PCA basis of a ResNet
    would be gigabytes on disk, read and hashed at every load)."""
    if not isinstance(source, nn.Cell):
        return True
    total = sum(param.nbytes for param in source.get_parameters())
    for _, cell in source.cells_and_names():
        total += sum(v.nbytes for v in vars(cell).values() if type(v) is Tensor)
    return total <= MAX_ENTRY_BYTES


def description(source: Any, args: Any, kwargs: Any, phase: str, rest: tuple = ()) -> str | None:
    """A digest of everything the graph compiled from `source` and these inputs depends on, the
    same in every process that compiles it, every value by value (graph_pool.describe); None
    (said at debug level) when it cannot be described: a function's graph (`ms.jit`), a random
    operator, a value graph_pool cannot describe by value, a cell class without a source file."""
    if not isinstance(source, nn.Cell):
        return None
    try:
        cells = graph_pool.cell_key(source)
        sources = sorted({_class_source(type(cell)) for _, cell in source.cells_and_names()})
        inputs = [_inputs(args), _inputs(kwargs)]
    except (graph_pool.Unshared, OSError, TypeError) as ex:
        log.debug("compile cache: %s not described (%s); compiled without the cache", phase, ex)
        return None
    kinds = [graph_pool.context_key(), cells, sources, phase.split(".")[0], *inputs, repr(rest)]
    return hashlib.sha256(repr(kinds).encode()).hexdigest()


def _class_source(kind: type) -> str:
    path = inspect.getsourcefile(kind)
    if path is None:
        raise OSError(f"{kind.__qualname__} has no source file")
    return f"{kind.__module__}.{kind.__qualname__}:{_file_digest(path)}"


def _inputs(value: Any) -> Any:
    """Inputs by what a graph is compiled for: shapes and dtypes, a parameter's name too."""
    if isinstance(value, Parameter):
        return ("param", value.name, tuple(value.shape), str(value.dtype))
    if isinstance(value, Tensor):
        return ("tensor", tuple(value.shape), str(value.dtype))
    if isinstance(value, (tuple, list)):
        return tuple(_inputs(item) for item in value)
    if isinstance(value, dict):
        return tuple(
            (str(k), _inputs(v)) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
        )
    return graph_pool.describe(value)


def _before(slot: Slot, index: int, graph: str) -> None:
    """Put the store's entry for `graph`, checked, at compile index `index` of the slot; when
    the store has none (or a damaged or foreign one, then deleted), an empty file, which
    MindSpore compiles over without ending its reading of the cache for the process."""
    slot.graphs.mkdir(parents=True, exist_ok=True, mode=0o700)
    for path in _entry_files(slot.graphs, index):
        path.unlink(missing_ok=True)
    _dependency_hash_in(slot)
    entry = slot.store / graph
    files = _checked_entry(entry, graph)
    if files is None:
        files = {f"compile_cache_{index}.mindir": b""}
    else:
        files = {pattern.format(index=index): data for pattern, data in files.items()}
        slot.placed[index] = entry
        _touch(entry)
    for name, data in files.items():
        _write_atomically(slot.graphs / name, data)
    slot.offered[index] = _mtimes(_entry_files(slot.graphs, index))


def _after(slot: Slot, index: int, graph: str | None) -> None:
    """Count entry `index` loaded when MindSpore left the files put there alone; otherwise
    store what it wrote for `graph`. A compile that failed leaves nothing behind."""
    files = _entry_files(slot.graphs, index)
    offered, entry = slot.offered.pop(index, None), slot.placed.pop(index, None)
    if graph is None or not files or any(p.stat().st_size == 0 for p in files):
        for path in files:
            path.unlink(missing_ok=True)
        return
    if offered == _mtimes(files):
        slot.loaded += 1
        return
    if entry is not None:  # MindSpore compiled over an entry it could not use: replace it
        _delete(entry)
    _store(slot, index, graph, files)
    _dependency_hash_out(slot)
    _bound(slot.root, slot.max_bytes)


def _checked_entry(entry: Path, graph: str) -> dict[str, bytes] | None:
    """The store entry `entry`'s files (name pattern -> bytes) when it was written for `graph`
    and every file still has its SHA-256; None when there is none, and a damaged or foreign
    entry is deleted."""
    try:
        meta = json.loads((entry / ENTRY).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        meta = None
    files: dict[str, bytes] = {}
    try:
        if not isinstance(meta, dict) or meta.get("graph") != graph:
            raise ValueError("foreign")
        for pattern, digest in dict(meta["files"]).items():
            if not _NAME.fullmatch(pattern) or not re.fullmatch("[0-9a-f]{64}", str(digest)):
                raise ValueError("foreign")  # a name that is not MindSpore's, a path
            data = (entry / digest).read_bytes()
            if hashlib.sha256(data).hexdigest() != digest:
                raise ValueError("damaged")
            files[pattern] = data
    except FileNotFoundError:  # pruned while being read
        return None
    except (OSError, ValueError, KeyError, TypeError) as ex:
        log.info("compile cache: entry %s is %s; compiling the graph again", entry.name, ex)
        _delete(entry)
        return None
    return files or None


def _store(slot: Slot, index: int, graph: str, files: list[Path]) -> None:
    """Store `files` (MindSpore's entry at `index`) under `graph`: a finished folder renamed
    into place, so a concurrent reader sees all of it or nothing; another process's entry for
    the same graph that got there first is kept."""
    slot.store.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = Path(tempfile.mkdtemp(prefix=".partial-", dir=slot.store))
    try:
        meta: dict[str, Any] = {"graph": graph, "files": {}}
        for path in files:
            data = path.read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            (partial / digest).write_bytes(data)
            pattern = _INDEX.sub(r"\1_{index}", path.name.replace("{", "{{").replace("}", "}}"))
            meta["files"][pattern] = digest
        (partial / ENTRY).write_text(json.dumps(meta, indent=1, sort_keys=True))
        try:
            os.rename(partial, slot.store / graph)
        except OSError:  # already stored by a process that compiled it at the same time
            return
    finally:
        shutil.rmtree(partial, ignore_errors=True)


_INDEX = re.compile(r"(compile_cache|group)_\d+(?!\d)")
_NAME = re.compile(r"[\w.-]*(compile_cache|group)_\{index\}[\w.-]*")  # a file name, no path


def _delete(entry: Path) -> None:
    """Remove a store entry: renamed out of the way first, so no reader sees part of it."""
    gone = entry.with_name(f".deleted-{entry.name}-{os.getpid()}-{id(entry)}")
    try:
        os.rename(entry, gone)
    except OSError:
        return  # already deleted by another process
    shutil.rmtree(gone, ignore_errors=True)


def _touch(entry: Path) -> None:
    """Mark `entry` used now (the size bound deletes the least recently used first)."""
    try:
        os.utime(entry)
    except OSError:
        pass


def _bound(root: Path, max_bytes: int) -> None:
    """Delete the least recently used entries of every store under `root` until their files
    take at most `max_bytes`; one process at a time (another already pruning: skipped)."""
    fd = os.open(root / ".prune.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return
    try:
        entries = []
        for entry in root.glob(f"*/{STORE}/*"):
            if entry.name.startswith("."):
                continue
            try:
                size = sum(p.stat().st_size for p in entry.iterdir())
                entries.append((entry.stat().st_mtime_ns, size, entry))
            except OSError:
                continue
        total = sum(size for _, size, _ in entries)
        for _, size, entry in sorted(entries, key=lambda e: (e[0], str(e[2]))):
            if total <= max_bytes:
                break
            _delete(entry)
            total -= size
    finally:
        os.close(fd)


def _dependency_hash_in(slot: Slot) -> None:
    """The store's copy of MindSpore's hash of the entry script's imports, in the slot before
    its first compile: without it MindSpore reads none of the process's entries."""
    if not (slot.graphs / DEPENDENCY_HASH).exists():
        try:
            data = (slot.store / DEPENDENCY_HASH).read_bytes()
        except FileNotFoundError:
            return
        _write_atomically(slot.graphs / DEPENDENCY_HASH, data)


def _dependency_hash_out(slot: Slot) -> None:
    """Keep in the store the hash MindSpore wrote in the slot (when the store has another)."""
    try:
        data = (slot.graphs / DEPENDENCY_HASH).read_bytes()
    except FileNotFoundError:
        return
    try:
        if (slot.store / DEPENDENCY_HASH).read_bytes() == data:
            return
    except FileNotFoundError:
        pass
    _write_atomically(slot.store / DEPENDENCY_HASH, data)


def _write_atomically(path: Path, data: bytes) -> None:
    """Write `path` by a rename of a finished file (owner-writable: MindSpore writes over it)."""
    fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


def _entry_files(graphs: Path, index: int) -> list[Path]:
    """Entry `index`'s files: the graph, and (Ascend, parallel jobs) the backend's and the
    parallel groups' files of that compile."""
    pattern = re.compile(rf"(compile_cache|group)_{index}(?!\d)")
    if not graphs.is_dir():
        return []
    return sorted(
        p for p in graphs.iterdir() if pattern.search(p.name) and not p.name.startswith(".")
    )


def _mtimes(files: list[Path]) -> dict[str, tuple[int, int]]:
    """Each file's modification time and size: unchanged after a compile when MindSpore loaded
    the entry (it writes the files of a graph it compiles)."""
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in files}


def counts() -> tuple[int, int]:
    """(graphs compiled, of them loaded from the cache) since this process switched it on."""
    return (_SLOT.compiles, _SLOT.loaded) if _SLOT is not None else (0, 0)


@contextmanager
def cached(runtime, rank: int = 0) -> Iterator[None]:
    """The checked cache as a command's `runtime` node says (`compile_cache`,
    `compile_cache_dir`, `compile_cache_max_gb`) for the block, and at its end the line of what
    it gave."""
    use(
        runtime.compile_cache,
        runtime.compile_cache_dir,
        rank,
        getattr(runtime, "compile_cache_max_gb", None),
    )
    before = counts()
    yield
    report(before)


def report(before: tuple[int, int]) -> None:
    """Log what the cache gave since `before` (a `counts()`): how many compiled graphs came
    from it, and where it is."""
    compiles, loaded = counts()[0] - before[0], counts()[1] - before[1]
    if _SLOT is not None and _SLOT.on and compiles:
        log.info(
            "compile cache: %d of %d graphs loaded from %s "
            "(runtime.compile_cache=false turns it off)",
            loaded,
            compiles,
            _SLOT.store,
        )


def folder_problem(folder: str) -> str | None:
    """Why `runtime.compile_cache_dir=folder` cannot hold the cache (None when it can)."""
    path = Path(folder).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as ex:
        return (
            f"runtime.compile_cache_dir={folder}: cannot write there ({ex.strerror or ex}); "
            "give a writable folder, or runtime.compile_cache=false"
        )
    return None


def default_root() -> Path:
    """`$XDG_CACHE_HOME/sporeflow/compile` (`~/.cache/sporeflow/compile`)."""
    return user_cache_dir("compile")
