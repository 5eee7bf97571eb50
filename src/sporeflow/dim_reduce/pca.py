"""Streaming PCA of weight snapshots: the k x M basis stage 2 steps in.

MindSpore's built-in loads all N snapshots as one N x M float64 matrix (plus per-parameter
overhead), e.g. 30+ GB for ResNet-50 with 40 snapshots. Here the snapshots are read group of
parameters by group, each group's N x g block centred and folded into the N x N Gram matrix;
its top-k eigenvectors give the basis rows  p_j = v_j^T Xc / sqrt(lambda_j)  (orthonormal),
written group by group into a float32 .npy (memory-mapped). Peak memory: one block of at most
`chunk_mb` (one parameter when a parameter is larger), N x N, and the snapshot being read.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import mindspore as ms
import numpy as np
from tqdm.auto import tqdm

from sporeflow.dim_reduce.snapshots import DimReduceError


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


def read_weights(path: Path, layout: Layout, names=None) -> dict[str, np.ndarray]:
    """The named weights of one snapshot, checked against the layout (name and shape)."""
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


def _groups(layout: Layout, n: int, chunk_mb: float) -> list[list[int]]:
    """Consecutive parameter indices whose N x size float64 block fits in chunk_mb."""
    budget = chunk_mb * 2 ** 20 / (8 * n)
    groups, current, size = [], [], 0
    for i, s in enumerate(layout.sizes):
        if current and size + s > budget:
            groups.append(current)
            current, size = [], 0
        current.append(i)
        size += s
    return groups + [current] if current else groups


def _block(paths, layout: Layout, group: list[int]) -> np.ndarray:
    names = [layout.names[i] for i in group]
    rows = []
    for p in paths:
        weights = read_weights(p, layout, names)
        rows.append(np.concatenate([weights[n].ravel() for n in names]).astype(np.float64))
    block = np.stack(rows)
    return block - block.mean(axis=0)


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
    groups = _groups(layout, n, chunk_mb)
    offsets = np.concatenate([[0], np.cumsum(layout.sizes)])
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

    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}.tmp.npy")
        basis = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n_component, layout.total))
    else:
        basis = np.empty((n_component, layout.total), dtype=np.float32)
    for group in groups:
        block = _block(paths, layout, group)
        basis[:, offsets[group[0]]:offsets[group[-1] + 1]] = coef.T @ block
        bar.update(n)
    bar.close()
    if out_path is not None:
        basis.flush()
        del basis
        os.replace(tmp, out_path)
        return np.load(out_path, mmap_mode="r")
    return basis


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
