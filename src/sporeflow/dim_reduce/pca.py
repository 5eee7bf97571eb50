"""Streaming PCA of weight snapshots: the k x M basis stage 2 steps in.

MindSpore's built-in loads all N snapshots as one N x M float64 matrix (plus per-parameter
overhead), e.g. 30+ GB for ResNet-50 with 40 snapshots. Here the snapshots are read group of
parameters by group, each group's N x g block centred and folded into the N x N Gram matrix;
its top-k eigenvectors give the basis rows  p_j = v_j^T Xc / sqrt(lambda_j)  (orthonormal),
written group by group into a float32 .npy (memory-mapped). Peak memory: one block of at most
`chunk_mb` (large parameters are split across blocks), N x N, and the snapshot being read;
each snapshot file is read twice per block (Gram pass, projection pass).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import mindspore as ms
import numpy as np
from tqdm.auto import tqdm

from sporeflow.files import atomic_path
from sporeflow.dim_reduce.snapshots import LAYOUT_FILE, DimReduceError, read_layout


@dataclass(frozen=True)
class Layout:
    """Names and shapes of the trainable weights, in the order the basis columns follow."""
    names: tuple
    shapes: tuple

    @classmethod
    def of(cls, network) -> "Layout":
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
    for name, shape in zip(layout.names, layout.shapes):
        if name not in names:
            raise DimReduceError(f"snapshots in {directory} have no parameter {name!r}: "
                                 "they were saved from another network")
        if shapes[names.index(name)] != shape:
            raise DimReduceError(f"snapshots in {directory}: parameter {name!r} has shape "
                                 f"{shapes[names.index(name)]}, the network's is {shape}: "
                                 "they were saved from another network")
    if tuple(names) != layout.names:
        raise DimReduceError(f"snapshots in {directory} hold parameters {names[:3]}... in another "
                             f"order or number than this network's {list(layout.names[:3])}...")


def read_segments(path: Path, layout: Layout, segments) -> list[np.ndarray]:
    """Slices (param index, start, end) of one snapshot's flat weight vector."""
    if path.suffix == ".npy":
        flat = np.load(path, mmap_mode="r")
        if flat.shape != (layout.total,):
            raise DimReduceError(f"snapshot {path.name} holds {flat.shape} values, expected ({layout.total},)")
        offsets = np.concatenate([[0], np.cumsum(layout.sizes)]).astype(np.int64)
        return [np.asarray(flat[offsets[i] + a:offsets[i] + b]) for i, a, b in segments]
    weights = read_weights(path, layout, sorted({layout.names[i] for i, _, _ in segments}))
    return [weights[layout.names[i]].ravel()[a:b] for i, a, b in segments]


def read_all(path: Path, layout: Layout) -> dict[str, np.ndarray]:
    """Every weight of one snapshot, by name."""
    parts = read_segments(path, layout, [(i, 0, s) for i, s in enumerate(layout.sizes)])
    return {n: part.reshape(shape) for n, shape, part in zip(layout.names, layout.shapes, parts)}


def read_weights(path: Path, layout: Layout, names=None) -> dict[str, np.ndarray]:
    """The named weights of one .ckpt snapshot, checked against the layout (name and shape)."""
    wanted = set(layout.names if names is None else names)
    try:
        state = ms.load_checkpoint(str(path), choice_func=lambda n: n in wanted)
    except (ValueError, RuntimeError, OSError) as ex:
        if "empty after filter" in str(ex):  # none of the wanted names is in the file
            state = {}
        else:
            raise DimReduceError(f"cannot read snapshot {path}: {ex}") from ex
    shapes = dict(zip(layout.names, layout.shapes))
    out = {}
    for name in (n for n in layout.names if n in wanted):
        if name not in state:
            raise DimReduceError(f"snapshot {path.name} has no parameter {name!r}: "
                                 "it was saved from another network")
        value = state[name].asnumpy()
        if tuple(value.shape) != shapes[name]:
            raise DimReduceError(f"snapshot {path.name}: parameter {name!r} has shape {tuple(value.shape)}, "
                                 f"the network's is {shapes[name]}: it was saved from another network")
        out[name] = value
    return out


def snapshot_mean(paths, layout: Layout) -> dict[str, np.ndarray]:
    """The mean of the snapshots by weight name (float64; one snapshot in memory at a time):
    the centre the PCA's directions start from."""
    total = {name: np.zeros(shape, np.float64) for name, shape in zip(layout.names, layout.shapes)}
    for path in paths:
        for name, value in read_all(Path(path), layout).items():
            total[name] += value
    return {name: value / len(paths) for name, value in total.items()}


Segment = tuple  # (parameter index, first flat element, end): one slice of one parameter


def _groups(layout: Layout, n: int, chunk_mb: float) -> list[list[Segment]]:
    """Consecutive slices of the flat weight vector whose N x width float64 block fits in
    chunk_mb; a parameter larger than that is split across blocks."""
    budget = max(1, int(chunk_mb * 2 ** 20 / (8 * n)))
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


def _block(paths, layout: Layout, group: list[Segment]) -> np.ndarray:
    """The centred N x width float64 block of one group, filled in place row by row."""
    width = sum(end - start for _, start, end in group)
    block = np.empty((len(paths), width))
    for row, p in enumerate(paths):
        col = 0
        for part in read_segments(p, layout, group):
            block[row, col:col + len(part)] = part
            col += len(part)
        if not np.isfinite(block[row]).all():
            raise DimReduceError(f"snapshot {p.name} holds NaN or infinite weights: stage 1 diverged "
                                 "(lower optimizer.lr, or start snapshots later)")
    block -= block.mean(axis=0)
    return block


def check_count(n_snapshots: int, n_component: int) -> None:
    if n_snapshots <= n_component:
        raise DimReduceError(f"{n_snapshots} stage-1 snapshots cannot give n_component={n_component} "
                             f"principal directions: need more than {n_component} (raise "
                             "boost.snapshot.per_epoch or lower boost.snapshot.start_epoch or boost.n_component)")


def fingerprint(paths, layout: Layout, n_component: int) -> str:
    """Identifies a basis by its inputs: snapshot files (name, size, mtime), layout and k."""
    h = hashlib.sha256()
    for p in paths:
        st = Path(p).stat()
        h.update(f"{Path(p).name}:{st.st_size}:{st.st_mtime_ns};".encode())
    h.update(json.dumps([layout.names, layout.shapes, n_component]).encode())
    return h.hexdigest()[:16]


def streaming_pca(paths, layout: Layout, n_component: int, out_path: Path | None = None,
                  chunk_mb: float = 256.0, progress: bool = False) -> np.ndarray:
    """The k x M float32 basis of the centred snapshots (rows orthonormal, sign-normalised)."""
    paths = [Path(p) for p in paths]
    n = len(paths)
    check_count(n, n_component)
    for folder in {p.parent for p in paths if p.suffix == ".npy"}:
        check_npy_layout(folder, layout)
    groups = _groups(layout, n, chunk_mb)
    offsets = np.concatenate([[0], np.cumsum(layout.sizes)]).astype(np.int64)
    bar = tqdm(total=2 * len(groups) * n, desc="pca", unit="read", disable=not progress)

    gram = np.zeros((n, n))
    for group in groups:
        block = _block(paths, layout, group)
        gram += block @ block.T
        bar.update(n)
    eigvals, eigvecs = np.linalg.eigh(gram)
    order = np.argsort(eigvals)[::-1][:n_component]
    eigvals, eigvecs = eigvals[order], eigvecs[:, order]
    if eigvals[-1] <= eigvals[0] * 1e-12:
        rank = int((eigvals > eigvals[0] * 1e-12).sum())
        raise DimReduceError(f"the {n} snapshots span only {rank} directions, fewer than "
                             f"n_component={n_component} (are they all the same weights?)")
    # a deterministic sign: the largest |coefficient| of each direction is positive
    signs = np.sign(eigvecs[np.abs(eigvecs).argmax(axis=0), np.arange(n_component)])
    coef = eigvecs * signs / np.sqrt(eigvals)

    def project(basis: np.ndarray) -> np.ndarray:
        for group in groups:
            block = _block(paths, layout, group)
            first, last = group[0], group[-1]
            basis[:, offsets[first[0]] + first[1]:offsets[last[0]] + last[2]] = coef.T @ block
            del block
            bar.update(n)
        bar.close()
        return basis

    if out_path is None:
        return project(np.empty((n_component, layout.total), dtype=np.float32))
    with atomic_path(out_path) as tmp:
        basis = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n_component, layout.total))
        project(basis).flush()
        del basis
    return np.load(out_path, mmap_mode="r")


def load_or_compute_basis(paths, layout: Layout, n_component: int, cache_dir: Path,
                          pca_mat_path: str | None = None, chunk_mb: float = 256.0,
                          progress: bool = False) -> tuple[np.ndarray, Path]:
    """The basis from `pca_mat_path`, else from the cache (keyed by fingerprint), else computed."""
    if pca_mat_path:
        path = Path(pca_mat_path)
        if not path.is_file():
            raise DimReduceError(f"boost.pca_mat_path={path} does not exist")
        basis = np.load(path, mmap_mode="r")
        if basis.shape != (n_component, layout.total):
            raise DimReduceError(f"boost.pca_mat_path={path} holds a {basis.shape} matrix; this network "
                                 f"and n_component need ({n_component}, {layout.total})")
        return basis, path
    path = Path(cache_dir) / f"pca_k{n_component}_{fingerprint(paths, layout, n_component)}.npy"
    if path.is_file():
        return np.load(path, mmap_mode="r"), path
    return streaming_pca(paths, layout, n_component, path, chunk_mb, progress), path
