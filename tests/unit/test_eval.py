"""eval.py (issue 34): a finished run's final weights evaluated again, in this process against
a real sqlite store. The accuracy it reports is the run's own `test/acc`; top-5, per-class
accuracy and the confusion matrix are checked against scikit-learn on the logits it saved."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from sklearn.metrics import confusion_matrix as sk_confusion
from sklearn.metrics import recall_score, top_k_accuracy_score

from helpers.inprocess import TINY, run_train_here, train_cli
from sporeflow.data.synthetic import Synthetic
from sporeflow.engine import compile_cache
from sporeflow.report import classification
from sporeflow.storage.run_marker import read_run_marker


def runs(launch, stage: str) -> list:
    client = MlflowClient(f"sqlite:///{launch}/mlflow.db")
    experiment = client.get_experiment_by_name("sporeflow")
    found = client.search_runs([experiment.experiment_id], f"tags.stage = '{stage}'")
    return sorted(found, key=lambda r: r.info.start_time)


def evaluate(launch, run_dir: str, *args: str):
    return run_train_here(list(args), launch, run_dir=run_dir, app="eval")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished plain run (a tiny network, one epoch): (launch dir, its MLflow run)."""
    launch = tmp_path_factory.mktemp("launch")
    proc = run_train_here([*TINY, "epochs=1", "seed=3"], launch)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (launch / "train.stderr").write_text(proc.stderr)
    (run,) = runs(launch, "train")
    return launch, run


def test_metrics_from_logits_equal_scikit_learn():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(500, 10)).astype(np.float32)
    labels = rng.integers(0, 10, 500)
    labels[labels == 4] = 3  # a class without images is left out of the per-class figures
    got = classification.classification_metrics(logits, labels)
    assert got["acc_top5"] == pytest.approx(
        top_k_accuracy_score(labels, logits, k=5, labels=range(10))
    )
    predicted = logits.argmax(axis=1)
    assert got["acc"] == pytest.approx(np.mean(predicted == labels))
    recall = recall_score(labels, predicted, labels=range(10), average=None, zero_division=0)
    assert "acc_class_4" not in got
    for c in (0, 1, 2, 3, 5, 6, 7, 8, 9):
        assert got[f"acc_class_{c}"] == pytest.approx(recall[c])
    assert (
        classification.confusion_matrix(predicted, labels, 10)
        == sk_confusion(labels, predicted, labels=range(10))
    ).all()
    assert "acc_top5" not in classification.classification_metrics(logits[:, :5], labels % 5)


def test_eval_of_a_run_reproduces_its_final_accuracy_and_records_what_it_measured(trained):
    launch, source = trained
    compiled_before = compile_cache.counts()[0]
    proc = evaluate(launch, "eval_dir", f"source={launch / 'run'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    # its eval graph went through the checked compile cache, which says what it gave
    assert compile_cache.counts()[0] > compiled_before
    assert re.search(r"compile cache: \d+ of [1-9]\d* graphs loaded", proc.stdout + proc.stderr)
    (run,) = runs(launch, "eval")
    assert run.info.status == "FINISHED"
    assert run.data.metrics["test/acc"] == source.data.metrics["test/acc"]
    assert run.data.metrics["test/loss"] == pytest.approx(
        source.data.metrics["test/loss"], rel=1e-5
    )
    assert run.data.tags["sporeflow.source_run"] == source.info.run_id
    assert run.data.tags["eval.split"] == "test" and run.data.params["model.hidden"] == "16"
    out = launch / "eval_dir"
    logits, labels = np.load(out / "logits.npy"), np.load(out / "labels.npy")
    assert len(labels) == 64  # TINY's test split, every image once
    assert run.data.metrics["test/acc_top5"] == pytest.approx(
        top_k_accuracy_score(labels, logits, k=5, labels=range(10))
    )
    table = np.loadtxt(out / "confusion_matrix.csv", delimiter=",", skiprows=1, dtype=int)[:, 1:]
    assert (table == sk_confusion(labels, logits.argmax(axis=1), labels=range(10))).all()
    assert (np.load(out / "predictions.npy") == (logits.argmax(axis=1) == labels)).all()
    # the training run recorded the same top-5 and per-class accuracy at its end
    trained_with = source.data.metrics
    assert trained_with["test/acc_top5"] == run.data.metrics["test/acc_top5"]
    assert 0.0 <= trained_with["final/val/acc_top5"] <= 1.0  # and on its validation images
    per_class = {k: v for k, v in run.data.metrics.items() if k.startswith("test/acc_class_")}
    assert len(per_class) == len(set(labels.tolist()))
    for key, value in per_class.items():
        assert trained_with[key] == pytest.approx(value), key
    client = MlflowClient(f"sqlite:///{launch}/mlflow.db")
    logged = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"logits.npy", "confusion_matrix.csv", "confusion_matrix.png"} <= logged
    assert f"eval of {launch / 'run'} on its test split: acc=" in proc.stderr


def test_eval_by_run_id_on_the_train_split_with_a_key_over_the_source(trained):
    launch, source = trained
    proc = evaluate(
        launch, "by_id", f"source={source.info.run_id}", "split=train", "dataset.batch_size=7"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = runs(launch, "eval")[-1]
    assert run.data.tags["eval.split"] == "train" and run.data.params["dataset.batch_size"] == "7"
    labels = np.load(launch / "by_id" / "labels.npy")
    trained_rows = Synthetic(image_size=8, channels=1, num_samples=128, test_samples=64)
    assert len(labels) == trained_rows.num_rows("train") < 128, "the training images, once"
    assert 0.0 <= run.data.metrics["train/acc"] <= 1.0


def test_the_run_key_a_run_dir_holds_is_a_source_and_the_summary_names_the_mlflow_id(trained):
    """issue 51 item 1: sporeflow_run.json holds the run's key (sf-..., the journal's id until
    the store gives one); eval.py takes it as it takes the MLflow id, and the training's
    summary line printed the MLflow id, which the store has."""
    launch, source = trained
    key = read_run_marker(launch / "run")["mlflow_run_id"]
    assert key.startswith("sf-") and key != source.info.run_id
    (summary,) = [x for x in (launch / "train.stderr").read_text().splitlines() if "weights " in x]
    assert summary.endswith(f", run {source.info.run_id}"), summary
    proc = evaluate(launch, "by_key", f"source={key}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = runs(launch, "eval")[-1]
    assert run.data.tags["sporeflow.source_run"] == source.info.run_id
    assert run.data.metrics["test/acc"] == source.data.metrics["test/acc"]


@pytest.mark.parametrize(
    ("source", "extra", "says"),
    [
        (
            "{launch}/nope",
            [],
            "no such file or folder",
        ),
        ("nope", [], "not a run dir, a stage dir, a .ckpt or .safetensors file, an MLflow run id"),
        ("sf-0123456789abcdef0123456789abc", [], "no run with this key in sqlite:///"),
        ("{launch}/mlartifacts", [], "holds no .hydra/config.yaml"),
        ("{launch}/run", ["model=mlp", "model.hidden=32"], "shape"),
        ("0123456789abcdef0123456789abcdef", [], "no such MLflow run"),
    ],
)
def test_a_source_that_cannot_be_evaluated_exits_2_before_any_work(trained, source, extra, says):
    launch, _ = trained
    before = len(runs(launch, "eval"))
    proc = evaluate(launch, "refused", f"source={source.format(launch=launch)}", *extra)
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("Config error: source=") and says in line, line
    assert len(runs(launch, "eval")) == before and not (launch / "refused").exists()


def test_a_refused_command_run_here_leaves_no_handler_on_its_removed_run_dir(trained):
    """The in-process helper puts the root logger back: a refused eval's run dir is removed,
    and a Hydra job-log handler left on it, once a `dictConfig` closed it (MLflow configures
    its loggers with one), reopened the missing file at the next log line of another test
    (CI, stop 44: test_cpu_isa failed with FileNotFoundError on refused/eval.log)."""
    import logging.config

    launch, _ = trained
    before = logging.getLogger().handlers[:]
    proc = evaluate(launch, "refused", f"source={launch / 'nope'}")
    assert proc.returncode == 2 and not (launch / "refused").exists()
    assert logging.getLogger().handlers == before
    logging.config.dictConfig({"version": 1, "disable_existing_loggers": False})
    logging.getLogger("sporeflow.test").warning("a line after a refused command")


def stored_test_images(count: int) -> np.ndarray:
    """TINY's test images as stored (HWC uint8), in the split's order."""
    from sporeflow.data.sampling import EpochSampler
    from sporeflow.data.synthetic import Synthetic

    data = Synthetic(image_size=8, channels=1, num_samples=128, test_samples=count)
    source = data._source("test", EpochSampler(count, 0, False, 0, None, None))
    return np.stack([row["image"] for row in source.create_dict_iterator(output_numpy=True)])


def predicted(csv_file) -> tuple[list[str], np.ndarray, np.ndarray]:
    import csv

    with open(csv_file, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["file", "label", *(f"p_{c}" for c in range(10))]
    names = [r[0] for r in rows[1:]]
    labels = np.array([int(r[1]) for r in rows[1:]])
    return names, labels, np.array([[float(p) for p in r[2:]] for r in rows[1:]])


def test_predict_on_png_files_and_a_npy_batch_gives_what_eval_computes(
    trained, tmp_path, monkeypatch, capsys
):
    from PIL import Image
    from scipy.special import softmax

    from sporeflow.entry import cli

    launch, _ = trained
    assert evaluate(launch, "eval_for_predict", f"source={launch / 'run'}").returncode == 0
    logits = np.load(launch / "eval_for_predict" / "logits.npy")
    images = stored_test_images(len(logits))
    folder = tmp_path / "pngs"
    (folder / "more").mkdir(parents=True)  # read recursively, in name order
    for i, image in enumerate(images):
        Image.fromarray(image[:, :, 0]).save(folder / ("more" if i >= 50 else "") / f"{i:03d}.png")
    np.save(tmp_path / "batch.npy", images)
    monkeypatch.chdir(launch)
    compile_cache.use(False)  # off, as in a process that trained nothing: predict turns it on
    compiled_before = compile_cache.counts()[0]
    for given, out in ((folder, "from_pngs.csv"), (tmp_path / "batch.npy", "from_npy.csv")):
        assert cli.main(["predict", str(launch / "run"), str(given), "--out", out]) == 0
    assert compile_cache.counts()[0] > compiled_before  # through the checked compile cache
    assert "replaced" not in capsys.readouterr().err
    assert cli.main(["predict", str(launch / "run"), str(tmp_path / "batch.npy")]) == 0
    assert cli.main(["predict", str(launch / "run"), str(tmp_path / "batch.npy")]) == 0
    said = capsys.readouterr().err.splitlines()  # the default --out, written twice
    assert said[-2].endswith(": predictions.csv") and said[-1].endswith(
        ": predictions.csv (it replaced the file there)"
    ), said
    assert not any("scaled up" in line for line in said)  # the data set's own size
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    for name, side in (("dot.png", 1), ("speck.png", 3), ("stored.png", 8)):
        Image.fromarray(images[0][:side, :side, 0]).save(tiny / name)
    assert cli.main(["predict", str(launch / "run"), str(tiny), "--out", "tiny.csv"]) == 0
    caveat = [line for line in capsys.readouterr().err.splitlines() if "scaled up" in line]
    assert caveat == [
        "[sporeflow] 2 of 3 images are less than half the 8 x 8 pixels of the images the "
        "network learned from and were scaled up to them (the smallest, dot.png, 8x from 1 "
        "pixel on its shorter side): their predictions rest on little"
    ]
    names, labels, probs = predicted(launch / "from_pngs.csv")
    assert names[0] == "000.png" and names[50] == "more/050.png" and len(names) == len(logits)
    assert (labels == logits.argmax(axis=1)).all()
    assert probs == pytest.approx(softmax(logits.astype(np.float64), axis=1), rel=1e-4, abs=1e-6)
    npy_names, npy_labels, npy_probs = predicted(launch / "from_npy.csv")
    assert npy_names[3] == "batch.npy[3]"
    assert (npy_labels == labels).all() and npy_probs == pytest.approx(probs, rel=1e-4, abs=1e-6)


def png_declaring(width: int, height: int) -> bytes:
    """A real 1-bit greyscale PNG of width x height, all black: its IDAT compresses the rows to
    almost nothing (the shape of a decompression bomb), made row by row without the image."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    row = b"\x00" * (1 + (width + 7) // 8)  # filter byte + packed bits
    packer = zlib.compressobj(9)
    idat = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    )


def test_predict_refuses_bad_input_in_one_line_before_any_work(trained, tmp_path, capsys):
    from helpers.pages import documented
    from sporeflow.entry import cli

    launch, _ = trained
    (tmp_path / "empty").mkdir()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "a.png").write_bytes(b"not a png")
    np.save(tmp_path / "floats.npy", np.zeros((2, 8, 8, 1), np.float32))
    (tmp_path / "bomb").mkdir()
    (tmp_path / "bomb" / "b.png").write_bytes(png_declaring(30000, 30000))  # 1-bit, ~100 B
    (tmp_path / "large").mkdir()
    (tmp_path / "large" / "l.png").write_bytes(png_declaring(9000, 9000))  # under PIL's limit
    cases = {
        str(tmp_path / "bomb"): "b.png: declares over 178956970 pixels; images of more than 50",
        str(
            tmp_path / "large"
        ): "l.png: declares 9000 x 9000 pixels; images of more than 50 megapixels are refused before decoding",
        str(tmp_path / "empty"): "holds no image files (JPEG, PNG, BMP, TIFF, WEBP, GIF, PPM)",
        str(tmp_path / "broken"): "a.png: not a readable image",
        str(tmp_path / "floats.npy"): "float32 array of shape (2, 8, 8, 1); expected uint8",
        str(tmp_path / "nothing"): "not a folder of image files (JPEG, PNG, BMP, TIFF, WEBP,",
    }
    for given, said in cases.items():
        out = tmp_path / "p.csv"
        assert cli.main(["predict", str(launch / "run"), given, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and said in err, err
        assert not out.exists()
        if "declares" in said:  # the line docs/troubleshooting.md quotes for a bomb
            assert documented(err, "troubleshooting.md"), err
    assert cli.main(["predict", str(tmp_path), str(tmp_path / "empty")]) == 2
    assert "not a run dir" in capsys.readouterr().err


def test_the_csv_names_each_label_where_the_data_set_names_its_classes():
    import csv
    import io

    from sporeflow.job.predict import Prediction, csv_text

    probs = np.array([[0.9, 0.1], [0.2, 0.8]])
    named = list(
        csv.reader(io.StringIO(csv_text(Prediction(("a,1.png", "b.png"), probs, ("cat", "dog")))))
    )
    assert named == [
        ["file", "label", "class", "p_cat", "p_dog"],
        ["a,1.png", "0", "cat", "0.9", "0.1"],
        ["b.png", "1", "dog", "0.2", "0.8"],
    ]
    plain = list(csv.reader(io.StringIO(csv_text(Prediction(("a.png",), probs[:1])))))
    assert plain[0] == ["file", "label", "p_0", "p_1"]


def test_train_eval_and_predict_refuse_mindspores_compile_cache(
    trained, tmp_path, monkeypatch, capsys
):
    """MS_COMPILER_CACHE_ENABLE=1 would hand one config's graph to another
    (tests/e2e/test_mindspore_compile_cache.py): all three entries refuse it in one line before
    any work."""
    from sporeflow.entry import cli

    launch, _ = trained
    monkeypatch.setenv("MS_COMPILER_CACHE_ENABLE", "1")
    said = "Config error: MS_COMPILER_CACHE_ENABLE=1: MindSpore's compile cache looks a graph up"
    before = len(runs(launch, "eval"))
    proc = evaluate(launch, "refused", f"source={launch / 'run'}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(said), line
    assert len(runs(launch, "eval")) == before and not (launch / "refused").exists()
    out = tmp_path / "p.csv"
    assert cli.main(["predict", str(launch / "run"), str(launch / "run"), "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert said.split(": ", 1)[1] in line and not out.exists(), line
    (tmp_path / "train").mkdir()
    code, err = train_cli([*TINY, "epochs=1"], tmp_path / "train")
    assert code == 2, err[-2000:]
    (line,) = err.strip().splitlines()
    assert line.startswith(said), line
    assert not (tmp_path / "train" / "mlflow.db").exists()


def test_a_registered_model_version_or_alias_is_a_source(trained):
    """`models:/<name>/<version>` and `models:/<name>@<alias>` stand for the run that made the
    version (registered here with MLflow's own client, as a sweep's decision registers one)."""
    launch, source = trained
    client = MlflowClient(f"sqlite:///{launch}/mlflow.db")
    client.create_registered_model("tiny-digits")
    client.create_model_version(
        "tiny-digits", source=f"runs:/{source.info.run_id}/model", run_id=source.info.run_id
    )
    client.set_registered_model_alias("tiny-digits", "chosen", "1")
    for uri, run_dir in (
        ("models:/tiny-digits/1", "by_version"),
        ("models:/tiny-digits@chosen", "by_alias"),
    ):
        proc = evaluate(launch, run_dir, f"source={uri}")
        assert proc.returncode == 0, proc.stderr[-3000:]
        run = runs(launch, "eval")[-1]
        assert run.data.tags["sporeflow.source"] == uri
        assert run.data.tags["sporeflow.source_run"] == source.info.run_id
        assert run.data.metrics["test/acc"] == source.data.metrics["test/acc"]
    # a missing version, and one registered from a path (it names no run): each its own line
    client.create_model_version("tiny-digits", source=str(launch / "run"))
    for version, says in (("9", "no such registered model"), ("2", "this version names no run")):
        proc = evaluate(launch, f"refused_{version}", f"source=models:/tiny-digits/{version}")
        assert proc.returncode == 2, proc.stderr[-2000:]
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith(f"Config error: source=models:/tiny-digits/{version}: {says}"), line


def artifact_file(launch, run, name: str):
    """Where the sqlite store's artifact root keeps `name` of `run` (a file under mlartifacts)."""
    from urllib.parse import urlparse

    return Path(urlparse(run.info.artifact_uri).path) / name


@contextlib.contextmanager
def changed(path, new: bytes):
    """`path` holds `new` while inside (someone with write access to the artifact store)."""
    old = path.read_bytes()
    path.write_bytes(new)
    try:
        yield
    finally:
        path.write_bytes(old)


def test_a_run_whose_dir_is_gone_is_fetched_from_the_store_and_checked(
    trained, tmp_path, monkeypatch, capsys
):
    """The run dir moved away (another machine's, or cleaned up): eval by run id copies the
    final weights and the logged config from the store's artifacts and reproduces test/acc;
    weights whose SHA-256 is not the one the run tagged, or a logged config whose model is not
    the run's recorded params, stop predict with one line before any work."""
    from sporeflow.entry import cli

    launch, source = trained
    run_id = source.info.run_id
    (launch / "run").rename(launch / "run.away")
    try:
        proc = evaluate(launch, "fetched", f"source={run_id}")
        assert proc.returncode == 0, proc.stderr[-3000:]
        run = runs(launch, "eval")[-1]
        assert run.data.metrics["test/acc"] == source.data.metrics["test/acc"]
        copy = launch / ".sporeflow" / "runs" / run_id
        assert run.data.tags["sporeflow.weights"] == str(copy / "checkpoints" / "final.ckpt")
        config = artifact_file(launch, source, "config/config.yaml")
        weights = artifact_file(launch, source, "checkpoints/final.ckpt")
        images = tmp_path / "images.npy"
        np.save(images, np.zeros((2, 8, 8), np.uint8))
        cases = {
            "weights": (
                weights,
                weights.read_bytes()[:-8] + b"\x00" * 8,
                "checkpoints/final.ckpt is not the file its run made",
            ),
            "config": (
                config,
                config.read_bytes().replace(b"hidden: 16", b"hidden: 64"),
                "is not the config run",
            ),
        }
        for case, (path, tampered, said) in cases.items():
            elsewhere = tmp_path / case  # a machine that has not fetched the run yet
            elsewhere.mkdir()
            monkeypatch.chdir(elsewhere)
            with changed(path, tampered):
                code = cli.main(
                    ["predict", run_id, str(images), "--uri", f"sqlite:///{launch}/mlflow.db"]
                )
            assert code == 2, case
            err = capsys.readouterr().err
            assert len(err.strip().splitlines()) == 1, err
            line = err.strip()
            assert line.startswith(f"sporeflow predict: source={run_id}: "), line
            assert said in line, line
            assert not (elsewhere / "predictions.csv").exists()
    finally:
        (launch / "run.away").rename(launch / "run")


def test_a_checkpoint_file_is_a_source_with_its_run_dirs_config_or_the_command_lines(
    trained, tmp_path, capsys
):
    """A .ckpt inside a run dir brings that run's config; one outside any run dir takes the
    network and data from eval.py's command line (and predict, which has none, refuses it); a
    file that is not a checkpoint is refused in one line."""
    import shutil

    from sporeflow.entry import cli

    launch, source = trained
    inside = launch / "run" / "checkpoints" / "final.ckpt"
    bare = tmp_path / "weights.ckpt"
    shutil.copyfile(inside, bare)
    for given, extra, run_dir in (
        (inside, [], "ckpt_inside"),
        (bare, [*TINY, "seed=3"], "ckpt_bare"),
    ):
        proc = evaluate(launch, run_dir, f"source={given}", *extra)
        assert proc.returncode == 0, proc.stderr[-3000:]
        run = runs(launch, "eval")[-1]
        assert run.data.tags["sporeflow.weights"] == str(given)
        assert run.data.metrics["test/acc"] == source.data.metrics["test/acc"]
    assert cli.main(["predict", str(bare), str(bare)]) == 2
    line = capsys.readouterr().err.strip()
    assert line.endswith(
        "give the run dir it came from, or evaluate it with python eval.py "
        f"source={bare} model=... dataset=..."
    ), line
    broken = tmp_path / "broken.ckpt"
    broken.write_bytes(b"not a checkpoint")
    proc = evaluate(launch, "refused", f"source={broken}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"Config error: source={broken}: cannot read checkpoint"), line
