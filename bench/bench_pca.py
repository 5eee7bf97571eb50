"""PCA cost: N = 40 snapshots at M = 1 M, 11 M and 25 M float32 parameters, side by side:
sporeflow's streaming PCA (from the .npy snapshots stage 1 writes), MindSpore's built-in
(`_load_weights` + `_compute_pca_mat`, from .ckpt copies of the same snapshots) and the I/O
floor - reading every snapshot's bytes once - each with a cold page cache (the files' pages
evicted with posix_fadvise(DONTNEED) first) and a warm one. Every PCA runs in a fresh process;
peak memory is its peak RSS above what it held before starting (MindSpore imported).
The built-in holds N x M float64 at once (and more while loading): above --builtin-max-m
million parameters it is not run, its figures are extrapolated linearly from the largest size
it ran at, and the table says so.
Goals (issue 13): time <= 3x the cold I/O floor; peak RSS <= one snapshot + k x M + N^2 floats
+ the block budget (pca_chunk_mb, 256 MB).
Usage: python bench/bench_pca.py [sizes in millions, e.g. 1,11,25] [--snapshots 40] [--builtin-max-m 11]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")

import numpy as np

K, CHUNK_MB = 32, 256.0

WORKER = r"""
import resource, sys, time
from pathlib import Path
from mindspore import nn
kind, folder = sys.argv[1], Path(sys.argv[2])
k, hidden, chunk_mb = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
net = nn.SequentialCell([nn.Dense(1000, hidden), nn.Dense(hidden, 10)])
import numpy as np
from mindspore.boost.base import _load_weights, _compute_pca_mat
from sporeflow.dim_reduce.pca import Layout, streaming_pca
from sporeflow.dim_reduce.snapshots import list_snapshots
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
if kind == "builtin":
    basis = _compute_pca_mat(_load_weights(str(folder / "ckpt"), net), k)
else:
    basis = streaming_pca(list_snapshots(folder / "npy"), Layout.of(net), k, out_path=folder / "basis.npy",
                          chunk_mb=chunk_mb)
seconds = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(f"RESULT {(peak - base) / 1024:.1f} {seconds:.2f}")
"""


def hidden_for(million: float) -> int:
    return int(million * 1e6 / 1011)


def write_snapshots(folder: Path, n: int, hidden: int, ckpt: bool) -> int:
    """n snapshots along a random walk (a drift plus noise per step), as stage 1 writes them
    (.npy + layout.json), and as .ckpt files for the built-in when `ckpt`."""
    import mindspore as ms
    from mindspore import Tensor, nn

    net = nn.SequentialCell([nn.Dense(1000, hidden), nn.Dense(hidden, 10)])
    params = net.trainable_params()
    sizes = [int(np.prod(p.shape)) for p in params]
    (folder / "npy").mkdir(parents=True)
    (folder / "npy" / "layout.json").write_text(
        json.dumps({"names": [p.name for p in params], "shapes": [list(p.shape) for p in params]})
    )
    rng = np.random.default_rng(0)
    weights = np.concatenate([p.asnumpy().ravel() for p in params])
    drift = rng.standard_normal(weights.size, dtype=np.float32) * np.float32(1e-3)
    for i in range(n):
        weights += drift * np.float32(1 + 0.05 * i) + rng.standard_normal(
            weights.size, dtype=np.float32
        ) * np.float32(3e-4)
        np.save(folder / "npy" / f"snapshot_e{i + 1:04d}_s00001.npy", weights)
        if ckpt:
            (folder / "ckpt").mkdir(exist_ok=True)
            parts = np.split(weights, np.cumsum(sizes)[:-1])
            ms.save_checkpoint(
                [
                    {"name": p.name, "data": Tensor(v.reshape(p.shape))}
                    for p, v in zip(params, parts, strict=False)
                ],
                str(folder / "ckpt" / f"snapshot_{i:03d}.ckpt"),
            )
    return weights.size


def evict(folder: Path) -> None:
    """Drop the files' pages from the page cache: the next read comes from the disk."""
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())  # dirty pages cannot be dropped
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def read_floor(folder: Path) -> float:
    """Seconds to read every .npy snapshot's bytes once."""
    buffer = bytearray(64 * 2**20)
    start = time.perf_counter()
    for path in sorted(folder.glob("*.npy")):
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buffer):
                pass
    return time.perf_counter() - start


def pca(kind: str, folder: Path, hidden: int) -> tuple[float, float]:
    """(peak MB above the start, seconds) of one PCA in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", WORKER, kind, str(folder), str(K), str(hidden), str(CHUNK_MB)],
        capture_output=True,
        text=True,
    )
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")), None)
    if line is None:
        raise RuntimeError(f"{kind} PCA failed:\n{out.stderr[-2000:]}")
    mb, seconds = line.split()[1:]
    return float(mb), float(seconds)


def measure(million: float, n: int, with_builtin: bool, root: Path) -> dict:
    folder = root / f"m{million:g}"
    m = write_snapshots(folder, n, hidden_for(million), with_builtin)
    found = {"m": m}
    evict(folder)
    found["floor_cold"] = read_floor(folder / "npy")
    found["floor_warm"] = read_floor(folder / "npy")
    evict(folder)
    found["cold"] = pca("streaming", folder, hidden_for(million))
    found["warm"] = pca("streaming", folder, hidden_for(million))
    if with_builtin:
        found["builtin"] = pca("builtin", folder, hidden_for(million))
    subprocess.run(["rm", "-rf", str(folder)], check=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="?", default="1,11,25")
    parser.add_argument("--snapshots", type=int, default=40)
    parser.add_argument("--builtin-max-m", type=float, default=11)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    rows = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP", "/var/tmp")) as tmp:
        for million in (float(s) for s in args.sizes.split(",")):
            rows[million] = measure(
                million, args.snapshots, million <= args.builtin_max_m, Path(tmp)
            )
            print(f"  measured {million:g} M", file=sys.stderr, flush=True)
    n = args.snapshots
    print(
        f"PCA of {n} snapshots, k={K}, float32 .npy, pca_chunk_mb={CHUNK_MB:g}, {os.cpu_count()} cores; "
        "seconds (peak MB above start):"
    )
    print(
        f"  {'params':>7s} {'read cold':>10s} {'read warm':>10s} {'sporeflow cold':>18s} {'sporeflow warm':>18s} "
        f"{'built-in':>22s} {'cold/floor':>11s} {'memory bound MB':>16s}"
    )
    largest = max((r for r in rows.values() if "builtin" in r), key=lambda r: r["m"], default=None)
    for r in rows.values():
        m = r["m"]
        if "builtin" in r:
            builtin = f"{r['builtin'][1]:7.1f} ({r['builtin'][0]:6.0f})"
        elif largest is not None:
            scale = m / largest["m"]
            builtin = f"~{largest['builtin'][1] * scale:5.0f} (~{largest['builtin'][0] * scale:5.0f}) extrap."
        else:
            builtin = "not run"
        bound = (m * 4 + K * m * 4 + n * n * 8) / 2**20 + CHUNK_MB
        print(
            f"  {m / 1e6:6.1f}M {r['floor_cold']:10.2f} {r['floor_warm']:10.2f} "
            f"{r['cold'][1]:8.2f} ({r['cold'][0]:6.0f}) {r['warm'][1]:8.2f} ({r['warm'][0]:6.0f}) {builtin:>22s} "
            f"{r['cold'][1] / r['floor_cold']:10.1f}x {bound:16.0f}"
        )


if __name__ == "__main__":
    main()
