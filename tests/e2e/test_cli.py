"""The `sporeflow` console script, run as a real subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import mindspore as ms
import numpy as np
from mindspore import Tensor
from mindspore.train import node_strategy_pb2 as pb

from helpers.shell import user_env

SPOREFLOW = str(Path(sys.executable).parent / "sporeflow")


def write_strategy(path: Path, layouts: dict, devices: int) -> None:
    """A real MindSpore strategy file: param -> tensor_map over a 1-D device matrix."""
    strategy = pb.ParallelStrategyMap()
    strategy.current_stage = 1
    for name, tensor_map in layouts.items():
        item = strategy.parallel_layout_item.add()
        item.param_name = name
        layout = item.parallel_layouts
        layout.dev_matrix.add().dim.extend([devices])
        layout.tensor_map.add().dim.extend(tensor_map)
        layout.param_split_shape.add()
        layout.indices_offset.add()
        layout.field, layout.opt_weight_shard_step, layout.opt_weight_shard_size = 0, 0, 0
    path.write_bytes(strategy.SerializeToString())


def test_merge_ckpt_rebuilds_the_full_weights(tmp_path):
    rng = np.random.default_rng(0)
    full = {
        "layer1.weight": rng.normal(size=(8, 6)).astype(np.float32),  # split along dim 1
        "layer3.weight": rng.normal(size=(4, 2)).astype(np.float32),  # split along dim 0
        "layer1.bias": rng.normal(size=(6,)).astype(np.float32),
    }  # replicated
    write_strategy(
        tmp_path / "strategy.ckpt",
        {"layer1.weight": [-1, 0], "layer3.weight": [0, -1], "layer1.bias": [-1]},
        2,
    )
    for r in range(2):
        (tmp_path / "ckpts" / f"rank_{r}").mkdir(parents=True)
        sliced = {
            "layer1.weight": full["layer1.weight"][:, 3 * r : 3 * r + 3],
            "layer3.weight": full["layer3.weight"][2 * r : 2 * r + 2],
            "layer1.bias": full["layer1.bias"],
        }
        ms.save_checkpoint(
            [{"name": k, "data": Tensor(v)} for k, v in sliced.items()],
            str(tmp_path / "ckpts" / f"rank_{r}" / "final.ckpt"),
        )
    out = tmp_path / "merged" / "full.ckpt"
    proc = subprocess.run(
        [
            SPOREFLOW,
            "merge-ckpt",
            "--src",
            str(tmp_path / "ckpts"),
            "--strategy",
            str(tmp_path / "strategy.ckpt"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    merged = ms.load_checkpoint(str(out))
    for name, value in full.items():
        np.testing.assert_array_equal(merged[name].asnumpy(), value)


def test_merge_ckpt_clear_errors(tmp_path):
    proc = subprocess.run(
        [
            SPOREFLOW,
            "merge-ckpt",
            "--src",
            str(tmp_path),
            "--strategy",
            str(tmp_path / "nope.ckpt"),
            "--out",
            str(tmp_path / "o.ckpt"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "nope.ckpt does not exist" in proc.stderr
    (tmp_path / "s.ckpt").write_bytes(b"")
    proc = subprocess.run(
        [
            SPOREFLOW,
            "merge-ckpt",
            "--src",
            str(tmp_path),
            "--strategy",
            str(tmp_path / "s.ckpt"),
            "--out",
            str(tmp_path / "o.ckpt"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "rank_<r>/" in proc.stderr


def test_help_lists_commands():
    proc = subprocess.run([SPOREFLOW, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "merge-ckpt" in proc.stdout and "compare" in proc.stdout


def test_ui_serves_the_store_and_sigterm_stops_every_process_it_started(tmp_path):
    """`sporeflow ui` starts `mlflow server` (which starts uvicorn and huey workers) and prints
    its links once that server answers on the port (with the port taken: exit 2, no links);
    SIGTERM to the command ends all of them and frees the port."""
    import signal
    import socket
    import time
    import urllib.request

    import psutil

    from sporeflow.tracking.store_reads import StoreReads
    from sporeflow.tracking.tracker import Tracker

    reads = StoreReads(f"sqlite:///{tmp_path / 'mlflow.db'}", "sporeflow")
    with Tracker(reads, journal_dir=tmp_path) as t:
        t.start_run("a run").end()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = user_env({"MLFLOW_TRACKING_URI": ""})
    with socket.socket() as other:  # another user's server holds the port: no links to it
        other.bind(("127.0.0.1", port))
        other.listen()
        taken = subprocess.run(
            [SPOREFLOW, "ui", "--port", str(port)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert taken.returncode == 2 and not taken.stdout, taken.stdout
    (line,) = taken.stderr.strip().splitlines()
    assert f"--port {port}" in line and "taken" in line, line
    ui = subprocess.Popen(
        [SPOREFLOW, "ui", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = ui.stdout.readline()  # the links come once the server answers on the port
        assert f"http://127.0.0.1:{port}/" in first, first
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as health:
            assert health.status == 200
        deadline, page = time.monotonic() + 120, None
        while page is None and time.monotonic() < deadline and ui.poll() is None:
            try:
                page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).status
            except OSError:
                time.sleep(1)
        assert page == 200, "the server never answered"
        started = psutil.Process(ui.pid).children(recursive=True)
        assert any("uvicorn" in " ".join(p.cmdline()) for p in started), [
            p.cmdline() for p in started
        ]
        ui.send_signal(signal.SIGINT)  # Ctrl-C
        assert ui.wait(timeout=60) == 128 + signal.SIGINT
        _, alive = psutil.wait_procs(started, timeout=15)
        assert not alive, [p.cmdline() for p in alive]
        said = ui.stderr.read()  # issue 51 item 6: no traceback, no line per request
        assert "Traceback" not in said and "KeyboardInterrupt" not in said, said[-3000:]
        assert "GET /health" not in said and "GET / " not in said, said[-3000:]
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, "the port is still served"
    finally:
        if ui.poll() is None:
            ui.kill()


def test_ui_on_a_tracking_server_links_into_it_and_starts_no_server(tmp_path):
    """issue 77 item 5: `sporeflow ui --uri http://...` started `mlflow server` over the http
    store, which cannot hold one (a traceback: "unsupported URI ... for model registry data
    storage", exit 1). A tracking server serves its own UI: the links open it, nothing is
    started; with it stopped, one line within seconds (MLflow's client retried for minutes)."""
    import time

    from mlflow.tracking import MlflowClient

    from helpers.servers import free_port, stop, wait_until_healthy

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [str(Path(SPOREFLOW).parent / "mlflow"), "server", "--host", "127.0.0.1"]
        + ["--port", str(port), "--workers", "1"]
        + ["--backend-store-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"],
        env=user_env({"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_until_healthy(url, server)
        experiment = MlflowClient(url).create_experiment("sporeflow")
        ui = subprocess.run(
            [SPOREFLOW, "ui", "--uri", url, "--port", str(free_port())],
            cwd=tmp_path,
            env=user_env({"MLFLOW_TRACKING_URI": ""}),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ui.returncode == 0, ui.stderr[-3000:]
        assert ui.stdout.split() == [
            "experiment",
            f"{url}/#/experiments/{experiment}/runs?workflowType=machine_learning",
        ], ui.stdout
        assert "Traceback" not in ui.stderr, ui.stderr[-3000:]
    finally:
        stop(server)
    start = time.monotonic()
    gone = subprocess.run(
        [SPOREFLOW, "ui", "--uri", url],
        cwd=tmp_path,
        env=user_env({"MLFLOW_TRACKING_URI": ""}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    took = time.monotonic() - start
    assert gone.returncode == 2 and not gone.stdout, gone.stdout
    (line,) = gone.stderr.strip().splitlines()
    assert line.startswith(f"--uri={url}: the tracking server does not answer"), line
    assert took < 30, took
