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
  and `entry.json` with the description digest and each file's name pattern, SHA-256 and size);
- before a compile, when the store holds an entry for this description, its files are copied,
  checked against the entry's description, their sizes and SHA-256, to the names MindSpore
  looks for at this process's next compile index: a graph any earlier job compiled loads, in
  whatever order and slot. A damaged or foreign entry is deleted from the store, and the graph
  compiled and stored again. The cache reads only what it may: a regular file (never a link,
  a FIFO whose read would wait forever, a device), only when it has the size its entry
  recorded (at most MAX_FILE_BYTES; an entry without sizes is foreign), in CHUNKs whatever its
  size.

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
What a killed process leaves of an entry it was storing (`.partial-*`) or deleting
(`.deleted-*`) counts against the bound, and is removed once no process holds its lock (each
is flock-ed while in use) and it has been left alone for LEFTOVER_IDLE_S.

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
import errno
import fcntl
import functools
import hashlib
import inspect
import json
import logging
import os
import re
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

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
ENTRY = "entry.json"  # in an entry's folder: the graph's digest, its files' names, SHA-256, sizes
DEPENDENCY_HASH = "compile_dependency.hash"  # MindSpore's hash of the entry script's imports
DEFAULT_MAX_GB = 10.0  # runtime.compile_cache_max_gb's default
MAX_FILE_BYTES = 2 * MAX_ENTRY_BYTES  # no file of a kept graph is larger (its weights and graph)
MAX_SMALL_BYTES = 2**20  # entry.json and compile_dependency.hash: a few hundred bytes each
CHUNK = 2**20  # what a file is read and hashed by: a memory bound whatever its size
LEFTOVER_IDLE_S = 60.0  # a leftover nobody holds, unchanged this long, is removed
LEFTOVER_STALE_S = 3600.0  # and one whose lock cannot be tested, once unchanged this long
LEFTOVERS = (".partial-", ".deleted-")  # an entry being stored, an entry being deleted
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
    """Whether a process holds `lock` (a slot's lock file, a leftover folder: an flock test that
    takes and releases it when free; OSError when it cannot be tested)."""
    fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
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
    """A cell class's source file's SHA-256 (a regular file, read in CHUNKs: `_copied`)."""
    return _copied(Path(path).resolve(), None, None)[0]


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
    except (OSError, ValueError) as ex:  # ValueError: a file of the slot `_copied` refuses
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
    if _offered(entry, graph, slot.graphs, index):
        slot.placed[index] = entry
        _touch(entry)
    else:
        _write_atomically(slot.graphs / f"compile_cache_{index}.mindir", b"")
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


def _offered(entry: Path, graph: str, graphs: Path, index: int) -> bool:
    """Copy the store entry `entry`'s files to their names at compile `index` in `graphs` when
    it was written for `graph` and every file is still the one it recorded (`_copied`: a
    regular file of its recorded size, then its SHA-256); False when there is none, and a
    damaged or foreign entry is deleted (said at info level) so the graph is compiled again."""
    copies: list[tuple[Path, Path]] = []  # (checked copy, the name MindSpore looks for)
    try:
        for pattern, (digest, size) in _entry_meta(entry, graph).items():
            final = graphs / pattern.format(index=index)
            copies.append((_checked_copy(entry / digest, final, size, digest), final))
    except FileNotFoundError:  # none, or pruned while being read
        _discard(copies)
        return False
    except (OSError, ValueError) as ex:
        _discard(copies)
        log.info("compile cache: entry %s not used (%s); compiling the graph again", entry.name, ex)
        _delete(entry)
        return False
    for copy, final in copies:
        os.replace(copy, final)
    return bool(copies)


def _discard(copies: list[tuple[Path, Path]]) -> None:
    for copy, _ in copies:
        copy.unlink(missing_ok=True)


def _entry_meta(entry: Path, graph: str) -> dict[str, tuple[str, int]]:
    """File name pattern -> (SHA-256, size) that store entry `entry` records, once it is a
    folder (not a link) written for `graph` naming MindSpore's files (no path) by digest and
    size (an entry without sizes, an older sporeflow's, is foreign). FileNotFoundError when
    there is none; ValueError saying what is wrong otherwise."""
    if not stat.S_ISDIR(os.lstat(entry).st_mode):
        raise ValueError("not a folder")
    try:
        meta = json.loads(_read_small(entry / ENTRY))
    except FileNotFoundError:
        raise
    except ValueError as ex:
        raise ValueError(f"unreadable ({ex})") from None
    if not isinstance(meta, dict) or meta.get("graph") != graph:
        raise ValueError("foreign")
    files, sizes = meta.get("files"), meta.get("sizes")
    if not isinstance(files, dict) or not isinstance(sizes, dict):
        raise ValueError("foreign (no file sizes recorded)")
    found = {}
    for pattern, digest in files.items():
        size = sizes.get(pattern)
        if not _NAME.fullmatch(pattern) or not re.fullmatch("[0-9a-f]{64}", str(digest)):
            raise ValueError("foreign")  # a name that is not MindSpore's, a path
        if type(size) is not int or not 0 <= size <= MAX_FILE_BYTES:
            raise ValueError(f"foreign (size {size!r} recorded for {pattern})")
        found[pattern] = (str(digest), size)
    return found


def _checked_copy(source: Path, final: Path, size: int, digest: str) -> Path:
    """A copy of `source` beside `final`, under a hidden name, once it has `size` bytes and
    SHA-256 `digest`; ValueError (the copy removed) otherwise."""
    fd, copy = tempfile.mkstemp(prefix=f".{final.name}.", dir=final.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            if _copied(source, out, size)[0] != digest:
                raise ValueError("damaged")
    except BaseException:
        Path(copy).unlink(missing_ok=True)
        raise
    return Path(copy)


@contextmanager
def _opened(path: Path, most: int) -> Iterator[tuple[BinaryIO, int]]:
    """`path` open for reading, and its size, when it is a regular file of at most `most`
    bytes: never a link (out of the cache), a FIFO (whose read waits for a writer forever) or
    a device (that never ends), and never a file larger than the caller can take; ValueError
    saying which, before a byte is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as ex:
        if ex.errno == errno.ELOOP:
            raise ValueError(f"file {path.name} is a link") from None
        raise
    with os.fdopen(fd, "rb") as file:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise ValueError(f"file {path.name} is not a regular file")
        if found.st_size > most:
            raise ValueError(f"file {path.name} has {found.st_size} bytes, more than {most}")
        yield file, found.st_size


def _read_small(path: Path) -> bytes:
    """A small file of the store (entry.json, MindSpore's dependency hash), read as `_opened`
    allows, at most MAX_SMALL_BYTES."""
    with _opened(path, MAX_SMALL_BYTES) as (file, size):
        return file.read(size)


def _copied(source: Path, out: BinaryIO | None, size: int | None) -> tuple[str, int]:
    """Copy `source` to `out` (None: only read it) in CHUNKs, and return its SHA-256 and size:
    only a regular file (`_opened`) of `size` bytes (None: any size up to MAX_FILE_BYTES); a
    file of another size is refused (ValueError) before it is read, and one that changes size
    while read too. Memory stays at one CHUNK whatever the file."""
    with _opened(source, MAX_FILE_BYTES if size is None else size) as (file, found):
        if size is not None and found != size:
            raise ValueError(f"file {source.name} has {found} bytes, {size} recorded")
        digest, done = hashlib.sha256(), 0
        while done < found and (chunk := file.read(min(CHUNK, found - done))):
            digest.update(chunk)
            if out is not None:
                out.write(chunk)
            done += len(chunk)
        if done != found or file.read(1):
            raise ValueError(f"file {source.name} changed size while read")
    return digest.hexdigest(), found


def _store(slot: Slot, index: int, graph: str, files: list[Path]) -> None:
    """Store `files` (MindSpore's entry at `index`) under `graph` with each file's SHA-256 and
    size: a finished folder renamed into place, so a concurrent reader sees all of it or
    nothing; another process's entry for the same graph that got there first is kept. The
    folder is locked while it is written (`_locked`), so no pruner takes it for a leftover."""
    slot.store.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = Path(tempfile.mkdtemp(prefix=LEFTOVERS[0], dir=slot.store))
    with _locked(partial):
        try:
            meta: dict[str, Any] = {"graph": graph, "files": {}, "sizes": {}}
            for path in files:
                fd, copy = tempfile.mkstemp(prefix=".copy-", dir=partial)
                with os.fdopen(fd, "wb") as out:
                    digest, size = _copied(path, out, None)
                os.replace(copy, partial / digest)
                pattern = _INDEX.sub(r"\1_{index}", path.name.replace("{", "{{").replace("}", "}}"))
                meta["files"][pattern] = digest
                meta["sizes"][pattern] = size
            (partial / ENTRY).write_text(json.dumps(meta, indent=1, sort_keys=True))
            with suppress(OSError):  # already stored by a process that compiled it meanwhile
                os.rename(partial, slot.store / graph)
        finally:
            shutil.rmtree(partial, ignore_errors=True)


_INDEX = re.compile(r"(compile_cache|group)_\d+(?!\d)")
_NAME = re.compile(r"[\w.-]*(compile_cache|group)_\{index\}[\w.-]*")  # a file name, no path


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """`folder` (an entry being stored or deleted) flock-ed by this process for the block: one
    a process that died inside leaves is held by nobody, which `_bound` counts and removes,
    and one a live process holds only counts. OSError when another process holds it or it is
    gone; on a file system without flock the block runs unlocked (`_nobodys` then goes by
    age)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise
        except OSError as ex:
            log.debug("compile cache: %s not locked (%s)", folder, ex)
        held, there = os.fstat(fd), os.lstat(folder)
        if (held.st_dev, held.st_ino) != (there.st_dev, there.st_ino):
            raise FileNotFoundError(f"{folder} was replaced")
        yield
    finally:
        os.close(fd)


def _delete(entry: Path) -> None:
    """Remove a store entry: renamed out of the way first, and held while it is removed
    (`_locked`), so no reader sees part of it. A store name that is not a folder (a link, a
    file) is unlinked."""
    if not entry.is_dir() or entry.is_symlink():
        with suppress(OSError):
            entry.unlink()
        return
    gone = entry.with_name(f"{LEFTOVERS[1]}{entry.name}-{os.getpid()}-{id(entry)}")
    with suppress(OSError), _locked(entry):  # OSError: being deleted, or deleted, by another
        os.rename(entry, gone)
        shutil.rmtree(gone, ignore_errors=True)


def _touch(entry: Path) -> None:
    """Mark `entry` used now (the size bound deletes the least recently used first)."""
    try:
        os.utime(entry)
    except OSError:
        pass


def _bound(root: Path, max_bytes: int) -> None:
    """Delete the least recently used entries of every store under `root` until their files,
    with the leftovers of stores and deletions (`.partial-*`, `.deleted-*`), take at most
    `max_bytes`; a leftover nobody holds is removed first (`_nobodys`). One process at a time
    (another already pruning: skipped)."""
    fd = os.open(root / ".prune.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return
    try:
        entries, total = [], 0
        for entry in root.glob(f"*/{STORE}/*"):
            try:
                found = os.lstat(entry)
                size = _size(entry, found)
            except OSError:
                continue
            if entry.name.startswith(LEFTOVERS):
                if _nobodys(entry, found.st_mtime):
                    _remove(entry)
                else:
                    total += size
            elif stat.S_ISDIR(found.st_mode) and not entry.name.startswith("."):
                entries.append((found.st_mtime_ns, size, entry))
                total += size
        for _, size, entry in sorted(entries, key=lambda e: (e[0], str(e[2]))):
            if total <= max_bytes:
                break
            _delete(entry)
            total -= size
    finally:
        os.close(fd)


def _size(path: Path, found: os.stat_result) -> int:
    """The bytes of `path`'s files (a store entry or leftover: a flat folder), links not
    followed; a file's own size."""
    if not stat.S_ISDIR(found.st_mode):
        return found.st_size
    with os.scandir(path) as files:
        return sum(f.stat(follow_symlinks=False).st_size for f in files)


def _nobodys(leftover: Path, mtime: float) -> bool:
    """Whether `leftover` is no live process's: nobody holds its lock (`_locked`) and it has
    not changed for LEFTOVER_IDLE_S (the instant between its making and its locking), or -
    where its lock cannot be tested (not a folder, a file system without flock) - for
    LEFTOVER_STALE_S."""
    idle = time.time() - mtime
    if idle < LEFTOVER_IDLE_S:
        return False
    try:
        return not _held(leftover)
    except OSError:
        return idle >= LEFTOVER_STALE_S


def _remove(leftover: Path) -> None:
    if leftover.is_dir() and not leftover.is_symlink():
        shutil.rmtree(leftover, ignore_errors=True)
    else:
        with suppress(OSError):
            leftover.unlink()


def _dependency_hash_in(slot: Slot) -> None:
    """The store's copy of MindSpore's hash of the entry script's imports, in the slot before
    its first compile: without it MindSpore reads none of the process's entries. (A copy that
    is not a small regular file is not offered; `_dependency_hash_out` replaces it.)"""
    if not (slot.graphs / DEPENDENCY_HASH).exists():
        try:
            data = _read_small(slot.store / DEPENDENCY_HASH)
        except FileNotFoundError:
            return
        except ValueError as ex:
            log.info("compile cache: %s; not offered", ex)
            return
        _write_atomically(slot.graphs / DEPENDENCY_HASH, data)


def _dependency_hash_out(slot: Slot) -> None:
    """Keep in the store the hash MindSpore wrote in the slot (when the store has another)."""
    try:
        data = _read_small(slot.graphs / DEPENDENCY_HASH)
    except (FileNotFoundError, ValueError):
        return
    try:
        if _read_small(slot.store / DEPENDENCY_HASH) == data:
            return
    except (FileNotFoundError, ValueError):
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
