"""Streaming PCA of weight snapshots: the k x M basis stage 2 steps in.

MindSpore's built-in loads all N snapshots as one N x M float64 matrix (plus per-parameter
overhead), e.g. 30+ GB for ResNet-50 with 40 snapshots. Here the snapshots are read a group of
parameters at a time, as float32 differences to the middle snapshot; each group's N x g block is
folded into the N x N Gram matrix (a float64 sum) and centring happens on that N x N matrix. Its
top-k eigenvectors give the basis rows  p_j = v_j^T Xc / sqrt(lambda_j)  (orthonormal), whose
slices are written group by group into a float32 .npy.

Peak memory: blocks of at most `chunk_mb` in all (two buffers: one being read while the other is
multiplied; large parameters are split across blocks), k basis columns of the same width, and
N x N - not the k x M basis. Each snapshot file is read twice (Gram pass, projection pass; the
second usually from the page cache).
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from sporeflow.core import console
from sporeflow.dim_reduce.snapshots import LAYOUT_FILE, DimReduceError, read_layout
from sporeflow.storage.checkpoints import read_checkpoint
from sporeflow.storage.files import atomic_path


@dataclass(frozen=True)
class Layout:
    """Names and shapes of the trainable weights, in the order the basis columns follow."""

    names: tuple
    shapes: tuple

    @classmethod
    def of(cls, network) -> Layout:
        params = network.trainable_params()
        return cls(tuple(p.name for p in params), tuple(tuple(p.shape) for p in params))

    @property
    def sizes(self) -> list[int]:
        return [int(np.prod(s)) if s else 1 for s in self.shapes]

    @property
    def total(self) -> int:
        return sum(self.sizes)


def check_npy_layout(directory: Path, layout: Layout) -> None:
    """.npy snapshots carry no names: compare the layout.json written beside them."""
    recorded = read_layout(directory)
    if recorded is None:
        raise DimReduceError(f"{directory} has .npy snapshots but no {LAYOUT_FILE}")
    names, shapes = recorded["names"], [tuple(s) for s in recorded["shapes"]]
    for name, shape in zip(layout.names, layout.shapes, strict=False):
        if name not in names:
            raise DimReduceError(
                f"snapshots in {directory} have no parameter {name!r}: "
                "they were saved from another network"
            )
        if shapes[names.index(name)] != shape:
            raise DimReduceError(
                f"snapshots in {directory}: parameter {name!r} has shape "
                f"{shapes[names.index(name)]}, the network's is {shape}: "
                "they were saved from another network"
            )
    if tuple(names) != layout.names:
        raise DimReduceError(
            f"snapshots in {directory} hold parameters {names[:3]}... in another "
            f"order or number than this network's {list(layout.names[:3])}..."
        )


def read_segments(path: Path, layout: Layout, segments) -> list[np.ndarray]:
    """Slices (param index, start, end) of one snapshot's flat weight vector."""
    if path.suffix == ".npy":
        flat = np.load(path, mmap_mode="r")
        if flat.shape != (layout.total,):
            raise DimReduceError(
                f"snapshot {path.name} holds {flat.shape} values, expected ({layout.total},)"
            )
        offsets = np.concatenate([[0], np.cumsum(layout.sizes)]).astype(np.int64)
        return [np.asarray(flat[offsets[i] + a : offsets[i] + b]) for i, a, b in segments]
    weights = read_weights(path, layout, sorted({layout.names[i] for i, _, _ in segments}))
    return [weights[layout.names[i]].ravel()[a:b] for i, a, b in segments]


def read_flat_into(path: Path, layout: Layout, start: int, out: np.ndarray) -> bool:
    """Read elements start.. of a float32 .npy snapshot straight into `out` (one read, no
    temporary); False when the file is not a flat float32 .npy (read it with read_segments)."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version not in ((1, 0), (2, 0)):
            return False
        read_header = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        shape, fortran, dtype = read_header(f)
        if dtype != np.float32 or fortran:
            return False
        if shape != (layout.total,):
            raise DimReduceError(
                f"snapshot {path.name} holds {shape} values, expected ({layout.total},)"
            )
        f.seek(f.tell() + 4 * start)
        if f.readinto(out.data) != out.nbytes:
            raise DimReduceError(
                f"snapshot {path.name} is shorter than its header says (truncated file)"
            )
    return True


def read_all(path: Path, layout: Layout) -> dict[str, np.ndarray]:
    """Every weight of one snapshot, by name."""
    parts = read_segments(path, layout, [(i, 0, s) for i, s in enumerate(layout.sizes)])
    return {
        n: part.reshape(shape)
        for n, shape, part in zip(layout.names, layout.shapes, parts, strict=False)
    }


def read_weights(path: Path, layout: Layout, names=None) -> dict[str, np.ndarray]:
    """The named weights of one checkpoint snapshot (.ckpt or .safetensors), checked against the
    layout (name and shape)."""
    wanted = set(layout.names if names is None else names)
    try:
        state = read_checkpoint(path, choice_func=lambda n: n in wanted)
    except (ValueError, RuntimeError, OSError) as ex:
        if "empty after filter" in str(ex):  # none of the wanted names is in the file
            state = {}
        else:
            raise DimReduceError(f"cannot read snapshot {path}: {ex}") from ex
    shapes = dict(zip(layout.names, layout.shapes, strict=False))
    out = {}
    for name in (n for n in layout.names if n in wanted):
        if name not in state:
            raise DimReduceError(
                f"snapshot {path.name} has no parameter {name!r}: it was saved from another network"
            )
        value = state[name].asnumpy()
        if tuple(value.shape) != shapes[name]:
            raise DimReduceError(
                f"snapshot {path.name}: parameter {name!r} has shape {tuple(value.shape)}, "
                f"the network's is {shapes[name]}: it was saved from another network"
            )
        out[name] = value
    return out


def snapshot_mean(paths, layout: Layout) -> dict[str, np.ndarray]:
    """The mean of the snapshots by weight name (float64; one snapshot in memory at a time):
    the centre the PCA's directions start from."""
    total = {
        name: np.zeros(shape, np.float64)
        for name, shape in zip(layout.names, layout.shapes, strict=False)
    }
    for path in paths:
        for name, value in read_all(Path(path), layout).items():
            total[name] += value
    return {name: value / len(paths) for name, value in total.items()}


Segment = tuple  # (parameter index, first flat element, end): one slice of one parameter


def _groups(layout: Layout, n: int, chunk_mb: float) -> list[list[Segment]]:
    """Consecutive slices of the flat weight vector whose N x width float32 block fits in
    chunk_mb; a parameter larger than that is split across blocks."""
    budget = max(1, int(chunk_mb * 2**20 / (4 * n)))
    groups, current, width = [], [], 0
    for i, size in enumerate(layout.sizes):
        start = 0
        while start < size:
            take = min(size - start, budget - width)
            current.append((i, start, start + take))
            width += take
            start += take
            if width == budget:
                groups.append(current)
                current, width = [], 0
    return groups + [current] if current else groups


def _width(group: list[Segment]) -> int:
    return sum(end - start for _, start, end in group)


def _differences(
    paths, layout: Layout, group: list[Segment], buffer: np.ndarray, ref: int
) -> np.ndarray:
    """The group's N x width block of snapshot minus snapshot `ref`, in `buffer`'s memory.

    Differences, not raw weights: they are small (nearby points of one trajectory), so their
    float32 products lose nothing to the size of the weights themselves, and centring them
    later is the same as centring the snapshots (the reference cancels)."""
    block = buffer[:, : _width(group)]
    first = group[0]
    start = sum(layout.sizes[: first[0]]) + first[1]  # a group is one run of the flat vector
    for row, p in enumerate(paths):
        if p.suffix == ".npy" and read_flat_into(p, layout, start, block[row]):
            continue
        col = 0
        for part in read_segments(p, layout, group):
            block[row, col : col + len(part)] = part
            col += len(part)
    reference = block[ref].copy()
    if not np.isfinite(reference).all():
        _diverged(paths[ref])
    block -= reference
    return block


def _blocks(paths, layout: Layout, groups, chunk_mb: float, ref: int):
    """(group, differences block) for each group in turn; a reader thread fills the next block
    while the caller multiplies this one (numpy releases the GIL in copies and BLAS), so file
    reads overlap the arithmetic. Two buffers of chunk_mb / 2 each."""
    width = max(_width(g) for g in groups)
    buffers = [np.empty((len(paths), width), np.float32) for _ in range(min(2, len(groups)))]
    with ThreadPoolExecutor(1, thread_name_prefix="pca-read") as reader:
        pending = reader.submit(_differences, paths, layout, groups[0], buffers[0], ref)
        for i, group in enumerate(groups):
            block = pending.result()
            if i + 1 < len(groups):
                pending = reader.submit(
                    _differences, paths, layout, groups[i + 1], buffers[(i + 1) % 2], ref
                )
            yield group, block


def _diverged(path: Path):
    raise DimReduceError(
        f"snapshot {path.name} holds NaN or infinite weights: stage 1 diverged "
        "(lower optimizer.lr, or start snapshots later)"
    )


def check_count(n_snapshots: int, n_component: int) -> None:
    if n_snapshots <= n_component:
        raise DimReduceError(
            f"{n_snapshots} stage-1 snapshots cannot give n_component={n_component} "
            f"principal directions: need more than {n_component} (raise "
            "boost.snapshot.per_epoch or lower boost.snapshot.start_epoch or boost.n_component)"
        )


def fingerprint(paths, layout: Layout, n_component: int) -> str:
    """Identifies a basis by its inputs: snapshot files (name, size, mtime), layout and k."""
    h = hashlib.sha256()
    for p in paths:
        st = Path(p).stat()
        h.update(f"{Path(p).name}:{st.st_size}:{st.st_mtime_ns};".encode())
    h.update(json.dumps([layout.names, layout.shapes, n_component]).encode())
    return h.hexdigest()[:16]


def _coefficients(gram: np.ndarray, n_component: int) -> np.ndarray:
    """N x k weights turning snapshot differences into orthonormal basis rows: the top-k
    eigenvectors of the centred Gram matrix over sqrt(eigenvalue), each sign-normalised."""
    n = len(gram)
    centring = np.eye(n) - 1.0 / n
    eigvals, eigvecs = np.linalg.eigh(centring @ gram @ centring)
    order = np.argsort(eigvals)[::-1][:n_component]
    eigvals, eigvecs = eigvals[order], eigvecs[:, order]
    if eigvals[-1] <= eigvals[0] * 1e-12:
        rank = int((eigvals > eigvals[0] * 1e-12).sum())
        raise DimReduceError(
            f"the {n} snapshots span only {rank} directions, fewer than "
            f"n_component={n_component} (are they all the same weights?)"
        )
    # a deterministic sign: the largest |coefficient| of each direction is positive
    signs = np.sign(eigvecs[np.abs(eigvecs).argmax(axis=0), np.arange(n_component)])
    coef = eigvecs * signs / np.sqrt(eigvals)
    return coef - coef.mean(axis=0)  # = centring @ coef: the rows then sum to zero exactly


def streaming_pca(
    paths,
    layout: Layout,
    n_component: int,
    out_path: Path | None = None,
    chunk_mb: float = 256.0,
    progress: bool = False,
) -> np.ndarray:
    """The k x M float32 basis of the centred snapshots (rows orthonormal, sign-normalised).

    Two passes over the snapshot files, one block of parameters at a time: the first folds each
    block's N x N Gram matrix (of differences to the middle snapshot) into a float64 sum, the
    second writes each block's basis columns. Centring happens on the N x N matrices."""
    paths = [Path(p) for p in paths]
    n = len(paths)
    check_count(n, n_component)
    for folder in {p.parent for p in paths if p.suffix == ".npy"}:
        check_npy_layout(folder, layout)
    # two blocks and k basis columns fit in chunk_mb
    groups = _groups(layout, n, chunk_mb * n / (2 * n + n_component))
    ref = n // 2
    shown = None if progress else False  # a bar on a terminal only, never in a log file
    with tqdm(
        total=2 * len(groups) * n, desc="pca", unit="read", **console.bar_options(shown)
    ) as bar:
        gram = _gram(paths, layout, groups, chunk_mb, ref, bar)
        coef_t = np.ascontiguousarray(_coefficients(gram, n_component).T, dtype=np.float32)
        columns = _basis_columns(paths, layout, groups, chunk_mb, ref, coef_t, bar)
        if out_path is None:
            return _basis_in_memory(columns, n_component, layout.total)
        return _basis_to_file(columns, n_component, layout.total, out_path)


def _gram(paths, layout: Layout, groups, chunk_mb: float, ref: int, bar) -> np.ndarray:
    """First pass: the N x N float64 Gram matrix of the differences to snapshot `ref`, summed
    over the blocks; a snapshot with a non-finite value is named (DivergedError)."""
    n = len(paths)
    gram = np.zeros((n, n))
    for _, block in _blocks(paths, layout, groups, chunk_mb, ref):
        with np.errstate(invalid="ignore", over="ignore"):  # a diverged snapshot: named just below
            part = block @ block.T
        bad = np.flatnonzero(~np.isfinite(np.diag(part)))
        if bad.size:
            _diverged(paths[bad[0]])
        gram += part
        bar.update(n)
    return gram


def _basis_columns(paths, layout: Layout, groups, chunk_mb: float, ref: int, coef_t, bar):
    """Second pass: (first flat index, k x width basis columns) per group; one k x width
    buffer reused, so a caller copies what it keeps before the next."""
    offsets = np.concatenate([[0], np.cumsum(layout.sizes)]).astype(np.int64)
    out = np.empty((coef_t.shape[0], max(_width(g) for g in groups)), np.float32)
    for group, block in _blocks(paths, layout, groups, chunk_mb, ref):
        first = group[0]
        cols = out[:, : block.shape[1]]
        np.matmul(coef_t, block, out=cols)
        yield offsets[first[0]] + first[1], cols
        bar.update(len(paths))


def _basis_in_memory(columns, n_component: int, total: int) -> np.ndarray:
    basis = np.empty((n_component, total), dtype=np.float32)
    for start, cols in columns:
        basis[:, start : start + cols.shape[1]] = cols
    return basis


def _basis_to_file(columns, n_component: int, total: int, out_path: Path) -> np.ndarray:
    """The basis as `out_path` (.npy, written atomically), memory-mapped: the header first, then
    each row's slice written at its place, so no k x M array is ever in memory."""
    with atomic_path(out_path) as tmp:
        header = np.lib.format.open_memmap(
            tmp, mode="w+", dtype=np.float32, shape=(n_component, total)
        )
        data_offset = header.offset
        del header
        with open(tmp, "r+b") as f:
            for start, cols in columns:
                for row in range(n_component):
                    os.pwrite(f.fileno(), cols[row], data_offset + 4 * (row * total + start))
            f.flush()
            os.fsync(f.fileno())
    return np.load(out_path, mmap_mode="r")


def load_or_compute_basis(
    paths,
    layout: Layout,
    n_component: int,
    cache_dir: Path,
    pca_mat_path: str | None = None,
    chunk_mb: float = 256.0,
    progress: bool = False,
) -> tuple[np.ndarray, Path]:
    """The basis from `pca_mat_path`, else from the cache (keyed by fingerprint), else computed."""
    if pca_mat_path:
        path = Path(pca_mat_path)
        if not path.is_file():
            raise DimReduceError(f"boost.pca_mat_path={path} does not exist")
        basis = np.load(path, mmap_mode="r")
        if basis.shape != (n_component, layout.total):
            raise DimReduceError(
                f"boost.pca_mat_path={path} holds a {basis.shape} matrix; this network "
                f"and n_component need ({n_component}, {layout.total})"
            )
        return basis, path
    path = Path(cache_dir) / f"pca_k{n_component}_{fingerprint(paths, layout, n_component)}.npy"
    if path.is_file():
        return np.load(path, mmap_mode="r"), path
    return streaming_pca(paths, layout, n_component, path, chunk_mb, progress), path
