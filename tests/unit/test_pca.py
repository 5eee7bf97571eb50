"""Streaming PCA against a dense numpy SVD; snapshots; clear errors."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, nn

from helpers.dim_reduce_cases import TinyMLP
from sporeflow.dim_reduce.pca import Layout, load_or_compute_basis, streaming_pca
from sporeflow.dim_reduce.snapshots import DimReduceError, list_snapshots, snapshot_steps


def write_snapshots(directory, net, n, seed=0, offset=0.0):
    """n snapshots of net's trainable weights (+ offset) along a random low-dimensional trajectory."""
    rng = np.random.default_rng(seed)
    params = net.trainable_params()
    directory.mkdir(parents=True, exist_ok=True)
    base = [p.asnumpy() + np.float32(offset) for p in params]
    dirs = [[rng.normal(size=b.shape).astype(np.float32) for b in base] for _ in range(6)]
    rows = []
    for i in range(n):
        c = rng.normal(size=6) * np.array([5, 3, 2, 1, 0.5, 0.2])
        ws = [
            b
            + sum(ci * d[j] for ci, d in zip(c, dirs, strict=False))
            + 0.01 * rng.normal(size=b.shape).astype(np.float32)
            for j, b in enumerate(base)
        ]
        ms.save_checkpoint(
            [
                {"name": p.name, "data": Tensor(w.astype(np.float32))}
                for p, w in zip(params, ws, strict=False)
            ],
            str(directory / f"snapshot_e{i + 1:04d}_s00001.ckpt"),
        )
        rows.append(np.concatenate([w.ravel() for w in ws]))
    return np.stack(rows)


@pytest.mark.parametrize(
    "chunk_mb,offset",
    [
        (256.0, 0.0),
        (0.001, 0.0),  # one block; one parameter per block
        (0.001, 1000.0),
    ],
)  # weights far larger than their spread
def test_matches_dense_svd_up_to_sign(tmp_path, chunk_mb, offset):
    net = TinyMLP()
    data = write_snapshots(tmp_path / "snaps", net, 12, offset=offset)
    layout = Layout.of(net)
    basis = streaming_pca(list_snapshots(tmp_path / "snaps"), layout, 5, chunk_mb=chunk_mb)
    assert basis.dtype == np.float32 and basis.shape == (5, layout.total)
    written = streaming_pca(
        list_snapshots(tmp_path / "snaps"), layout, 5, tmp_path / "basis.npy", chunk_mb
    )
    np.testing.assert_array_equal(
        np.load(tmp_path / "basis.npy"), basis
    )  # the file, slice by slice
    assert written.shape == basis.shape
    centred = data.astype(np.float64) - data.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    for got, want in zip(basis, vt[:5], strict=False):
        assert abs(got @ want) == pytest.approx(1.0, abs=1e-4)
    np.testing.assert_allclose(basis @ basis.T, np.eye(5), atol=1e-4)


def test_basis_cached_by_fingerprint_outside_the_snapshot_folder(tmp_path):
    net = TinyMLP()
    write_snapshots(tmp_path / "snaps", net, 8)
    before = sorted(p.name for p in (tmp_path / "snaps").iterdir())
    paths = list_snapshots(tmp_path / "snaps")
    basis, path = load_or_compute_basis(paths, Layout.of(net), 4, tmp_path / "cache")
    assert path.parent == tmp_path / "cache" and path.name.startswith("pca_k4_")
    mtime = path.stat().st_mtime_ns
    again, path2 = load_or_compute_basis(paths, Layout.of(net), 4, tmp_path / "cache")
    assert path2 == path and path.stat().st_mtime_ns == mtime
    np.testing.assert_array_equal(np.asarray(again), np.asarray(basis))
    assert sorted(p.name for p in (tmp_path / "snaps").iterdir()) == before  # nothing written there
    _, path3 = load_or_compute_basis(paths, Layout.of(net), 3, tmp_path / "cache")
    assert path3 != path


def test_too_few_snapshots_names_both_numbers(tmp_path):
    net = TinyMLP()
    write_snapshots(tmp_path / "snaps", net, 4)
    with pytest.raises(DimReduceError, match="4 stage-1 snapshots .* n_component=4"):
        streaming_pca(list_snapshots(tmp_path / "snaps"), Layout.of(net), 4)


def test_snapshots_of_another_network_name_the_parameter(tmp_path):
    write_snapshots(tmp_path / "snaps", TinyMLP(hidden=10), 6)
    with pytest.raises(DimReduceError, match="fc1.weight.*shape"):
        streaming_pca(list_snapshots(tmp_path / "snaps"), Layout.of(TinyMLP()), 3)
    other = nn.Dense(16, 4)
    with pytest.raises(DimReduceError, match="no parameter 'weight'"):
        streaming_pca(list_snapshots(tmp_path / "snaps"), Layout.of(other), 3)


def test_missing_or_empty_snapshot_folder(tmp_path):
    with pytest.raises(DimReduceError, match="does not exist"):
        list_snapshots(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DimReduceError, match="holds no snapshot_"):
        list_snapshots(tmp_path / "empty")


def test_snapshot_steps_evenly_spaced():
    assert snapshot_steps(45, 2) == {22, 45}
    assert snapshot_steps(45, 1) == {45}
    assert snapshot_steps(3, 5) == {1, 2, 3}


def as_npy_snapshots(data, net, directory):
    """The flat .npy + layout.json form TakeSnapshots writes."""
    import json

    directory.mkdir(parents=True, exist_ok=True)
    params = net.trainable_params()
    (directory / "layout.json").write_text(
        json.dumps({"names": [p.name for p in params], "shapes": [list(p.shape) for p in params]})
    )
    for i, row in enumerate(data):
        np.save(directory / f"snapshot_e{i + 1:04d}_s00001.npy", row.astype(np.float32))


def test_npy_snapshots_give_the_same_basis_as_ckpt(tmp_path):
    net = TinyMLP()
    data = write_snapshots(tmp_path / "ckpt", net, 10)
    as_npy_snapshots(data, net, tmp_path / "npy")
    layout = Layout.of(net)
    from_ckpt = streaming_pca(list_snapshots(tmp_path / "ckpt"), layout, 4)
    paths = list_snapshots(tmp_path / "npy")
    assert all(p.suffix == ".npy" for p in paths)
    np.testing.assert_allclose(
        streaming_pca(paths, layout, 4, chunk_mb=0.001), from_ckpt, atol=1e-5
    )


def test_npy_snapshots_of_another_network_name_the_parameter(tmp_path):
    small = TinyMLP(hidden=10)
    as_npy_snapshots(
        np.zeros((6, sum(p.size for p in small.trainable_params()))), small, tmp_path / "npy"
    )
    with pytest.raises(DimReduceError, match="'fc1.weight' has shape"):
        streaming_pca(list_snapshots(tmp_path / "npy"), Layout.of(TinyMLP()), 3)


@pytest.mark.parametrize(
    "row,value", [(3, np.nan), (1, np.inf), (5, -np.inf)]
)  # 3: the reference row
def test_diverged_snapshots_are_named(tmp_path, row, value):
    net = TinyMLP()
    data = write_snapshots(tmp_path / "ckpt", net, 6)
    data[row, 5] = value
    as_npy_snapshots(data, net, tmp_path / "npy")
    with pytest.raises(
        DimReduceError, match=f"snapshot_e{row + 1:04d}_s00001.npy holds NaN or infinite"
    ):
        streaming_pca(list_snapshots(tmp_path / "npy"), Layout.of(net), 3)


def test_truncated_snapshot_is_named(tmp_path):
    net = TinyMLP()
    as_npy_snapshots(write_snapshots(tmp_path / "ckpt", net, 6), net, tmp_path / "npy")
    path = tmp_path / "npy" / "snapshot_e0002_s00001.npy"
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(
        DimReduceError, match="snapshot_e0002_s00001.npy is shorter than its header says"
    ):
        streaming_pca(list_snapshots(tmp_path / "npy"), Layout.of(net), 3)
