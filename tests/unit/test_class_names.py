"""Issue 75: a model carries its class names, and every file of an image folder is used or
named. Real image folders (every format and suffix case the issue lists), a real training job
run in this process, eval.py and `sporeflow predict` on its run, MLflow's loader on its model."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil

import numpy as np
import pytest
import yaml
from mlflow.tracking import MlflowClient
from PIL import Image

from helpers.inprocess import run_train_here
from helpers.train import IMAGE_FOLDER_JOB as FOLDER_JOB
from sporeflow.core.errors import DataError
from sporeflow.data.image_files import image_input
from sporeflow.data.image_folder import ImageFolder
from sporeflow.storage.checkpoints import (
    class_names_entry,
    final_weights,
    read_checkpoint,
    save_atomic,
    stored_class_names,
)

CLASSES = {"1": (250, 0, 0), "2": (0, 250, 0), "10": (0, 0, 250)}  # "10" sorts between


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """The record of checked images (data.readable) in this test's own cache folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def solid_tree(root, classes=CLASSES, train=6, val=3):
    for split, count in (("train", train), ("val", val)):
        for name, colour in classes.items():
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                Image.new("RGB", (40, 40), colour).save(root / split / name / f"{i}.jpg")
    return root


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A job trained on class folders 1, 2 and 10: (launch dir, data root)."""
    launch = tmp_path_factory.mktemp("launch")
    os.environ["XDG_CACHE_HOME"] = str(launch / "cache")
    try:
        root = solid_tree(launch / "data")
        proc = run_train_here([*FOLDER_JOB, f"dataset.root={root}"], launch)
    finally:
        os.environ.pop("XDG_CACHE_HOME")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return launch, root


def add_class(root, name="0", colour=(120, 120, 0)):
    """A class folder added to train/ after training: it sorts first."""
    (root / "train" / name).mkdir()
    for i in range(2):
        Image.new("RGB", (40, 40), colour).save(root / "train" / name / f"{i}.jpg")


def predicted_rows(launch, images, out):
    from sporeflow.entry import cli

    assert cli.main(["predict", str(launch / "run"), str(images), "--out", str(out)]) == 0
    return list(csv.reader(open(out, newline="")))


def evaluate(launch, run_dir, *args):
    return run_train_here(list(args), launch, run_dir=run_dir, app="eval")


# --- item 4: the class names travel with the model -----------------------------------------


def test_the_weights_and_the_packaged_model_hold_the_class_names(trained):
    launch, _ = trained
    stored = stored_class_names(final_weights(launch / "run"))
    assert stored == ["1", "10", "2"]  # the training split's folders, sorted as text
    spec = yaml.safe_load((launch / "run" / "model" / "network.yaml").read_text())
    assert spec["class_names"] == stored
    from sporeflow.serving.pyfunc import Classifier

    model = Classifier(launch / "run" / "model")
    batch = np.load(launch / "run" / "model" / "input_example.npy")
    out = model.predict(batch)
    assert out["class"].tolist() == [stored[k] for k in out["label"]]


def test_predict_and_eval_keep_their_labels_after_a_class_folder_is_added(
    trained, tmp_path, monkeypatch
):
    launch, root = trained
    monkeypatch.chdir(tmp_path)
    images = root / "val"
    before = predicted_rows(launch, images, tmp_path / "before.csv")
    assert evaluate(launch, "eval_before", f"source={launch / 'run'}").returncode == 0
    add_class(root)
    try:
        after = predicted_rows(launch, images, tmp_path / "after.csv")
        proc = evaluate(launch, "eval_after", f"source={launch / 'run'}")
    finally:
        shutil.rmtree(root / "train" / "0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert after == before
    assert before[0] == ["file", "label", "class", "p_1", "p_10", "p_2"]
    for row in before[1:]:  # the class column is the label's stored name
        assert row[2] == ["1", "10", "2"][int(row[1])]
    for name in ("labels.npy", "logits.npy"):
        np.testing.assert_array_equal(
            np.load(launch / "eval_before" / name), np.load(launch / "eval_after" / name)
        )
    labels = np.load(launch / "eval_after" / "labels.npy")
    assert sorted(set(labels.tolist())) == [0, 1, 2]
    table = list(csv.reader(open(launch / "eval_after" / "confusion_matrix.csv", newline="")))
    assert table[0] == ["true\\predicted", "1", "10", "2"]
    assert [row[0] for row in table[1:]] == ["1", "10", "2"]
    client = MlflowClient(f"sqlite:///{launch}/mlflow.db")
    experiment = client.get_experiment_by_name("sporeflow")
    run = client.search_runs([experiment.experiment_id], "tags.stage = 'eval'")[0]
    per_class = {k for k in run.data.metrics if k.startswith("test/acc_class_")}
    assert per_class == {"test/acc_class_1", "test/acc_class_10", "test/acc_class_2"}
    logits = np.load(launch / "eval_after" / "logits.npy")
    ten = labels == 1  # folder 10's images: label 1 of the stored names
    assert run.data.metrics["test/acc_class_10"] == pytest.approx(
        float(np.mean(logits[ten].argmax(axis=1) == 1))
    )


def test_eval_refuses_a_class_folder_the_model_does_not_know_in_one_line(trained):
    launch, root = trained
    shutil.copytree(root / "val" / "2", root / "val" / "3")
    try:
        proc = evaluate(launch, "refused", f"source={launch / 'run'}")
    finally:
        shutil.rmtree(root / "val" / "3")
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert f"{root / 'val'}: class folder(s) 3 not in the model" in line, line
    assert not (launch / "refused").exists()


def test_a_checkpoint_without_class_names_falls_back_with_a_warning(
    trained, tmp_path, monkeypatch, caplog
):
    """An old run's weights (written before the names were stored) still predict, named by the
    folders as they are now, said in one line."""
    launch, root = trained
    run = tmp_path / "old_run"
    shutil.copytree(launch / "run", run, ignore=shutil.ignore_patterns("model"))
    weights = final_weights(run)
    state = read_checkpoint(weights)
    from mindspore import Parameter

    params = [{"name": k, "data": v} for k, v in state.items() if isinstance(v, Parameter)]
    weights.unlink()
    save_atomic([p for p in params if p["name"] != "sporeflow.class_names"], weights)
    assert stored_class_names(weights) is None
    monkeypatch.chdir(tmp_path)
    from sporeflow.entry import cli

    out = tmp_path / "old.csv"
    assert cli.main(["predict", str(run), str(root / "val"), "--out", str(out)]) == 0
    rows = list(csv.reader(open(out, newline="")))
    assert rows[0][:3] == ["file", "label", "class"] and rows[1][2] in CLASSES
    said = [r.getMessage() for r in caplog.records if "hold no class names" in r.getMessage()]
    assert len(said) == 1 and "\n" not in said[0]


def test_the_python_api_names_classes_by_the_model(trained):
    import sporeflow

    launch, root = trained
    add_class(root)  # the run's train/ now numbers 0, 1, 10, 2
    try:
        found = sporeflow.load(launch / "run").predict(root / "val")
    finally:
        shutil.rmtree(root / "train" / "0")
    assert found.class_names == ("1", "10", "2")


def test_metric_names_of_classes_are_what_mlflow_takes():
    from sporeflow.report.classification import class_keys, classification_metrics

    logits = np.eye(3)[[0, 1, 2, 2]]
    got = classification_metrics(logits, np.array([0, 1, 2, 1]), ["cat", "dog's", "n01"])
    assert set(got) == {"acc", "acc_class_cat", "acc_class_dog_s", "acc_class_n01"}
    assert got["acc_class_dog_s"] == 0.5
    assert class_keys(["a?", "a!"], 2) == ["0", "1"]  # two would read the same: numbers
    assert class_keys(None, 2) == ["0", "1"]


# --- item 5: every file of an image folder is used or named --------------------------------


def _save(path, fmt, colour, mode="RGB"):
    Image.new(mode, (40, 36), colour).save(path, fmt)


def mixed_tree(root):
    """train/a: each format and suffix case the issue lists; train/b: WebP only; train/c:
    JPEG, and a note and a file with no suffix that are no images."""
    a, b, c = (root / "train" / n for n in "abc")
    for folder in (a, b, c, root / "val" / "a"):
        folder.mkdir(parents=True)
    _save(a / "0.bmp", "BMP", (250, 0, 0))
    _save(a / "1.webp", "WEBP", (250, 0, 0))
    _save(a / "2.tif", "TIFF", (250, 0, 0))
    _save(a / "3.TIFF", "TIFF", (250, 0, 0))
    _save(a / "4.Jpeg", "JPEG", (250, 0, 0))
    _save(a / "5.JPG", "JPEG", (250, 0, 0))
    _save(a / "6.png", "JPEG", (250, 0, 0))  # a JPEG named .png: by content
    _save(a / "7.gif", "GIF", 0, mode="P")
    (a / "deeper").mkdir()
    _save(a / "deeper" / "8.PNG", "PNG", (250, 0, 0))
    for i in range(3):
        _save(b / f"{i}.webp", "WEBP", (0, 250, 0))
    _save(c / "0.jpeg", "JPEG", (0, 0, 250))
    _save(c / "1", "PNG", (0, 0, 250))  # no suffix: an image by content
    (c / "notes.txt").write_text("where these came from")
    (c / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    _save(root / "val" / "a" / "0.webp", "WEBP", (250, 0, 0))
    return root


def test_every_file_of_an_image_folder_is_read_or_named(tmp_path, caplog):
    root = mixed_tree(tmp_path / "data")
    data = ImageFolder(root=str(root), image_size=16, num_classes=3, batch_size=4, val_split=0)
    data.check()
    listing = data.listing("train")
    names = sorted(str(f.relative_to(root / "train")) for f in listing.files)
    assert len(names) == 9 + 3 + 2 and "b/0.webp" in names and "a/4.Jpeg" in names
    assert sorted(map(str, listing.left_out)) == sorted(
        str(root / "train" / "c" / n) for n in ("notes.txt", ".DS_Store")
    )
    (line,) = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert line.startswith(f"{root / 'train'}: 2 of 16 files left out, not images")
    assert "c/notes.txt" in line and "c/.DS_Store" in line
    assert data.stored_labels("train").tolist() == [0] * 9 + [1] * 3 + [2] * 2
    read = data.create("train", shuffle=False, augment=False).create_tuple_iterator(
        output_numpy=True
    )
    images, labels = (np.concatenate(p) for p in zip(*read, strict=True))
    assert len(labels) == 14
    for image, label in zip(images, labels, strict=True):
        if label:  # class b green, class c blue: channel = label (a's GIF is black)
            assert image.mean(axis=(1, 2)).argmax() == label
    given = image_input(root / "train", channels=3)  # predict: the same rule
    assert sorted(given.names) == names
    assert "2 of 16 files left out" in given.left_out


def test_a_converted_image_feeds_the_network_what_pillow_decodes(tmp_path):
    """WebP (MindSpore's decoder cannot read it) and TIFF reach the network as the same pixels
    as the lossless PNG of the same image."""
    rgb = np.random.default_rng(4).integers(0, 256, (24, 20, 3), np.uint8)
    folder = tmp_path / "mine"
    folder.mkdir()
    Image.fromarray(rgb).save(folder / "a.png")
    Image.fromarray(rgb).save(folder / "b.webp", "WEBP", lossless=True)
    Image.fromarray(rgb).save(folder / "c.tif", "TIFF")
    data = ImageFolder(root=str(tmp_path), image_size=16, num_classes=1, batch_size=8)
    given = image_input(folder, channels=3)
    assert given.formats == ("PNG", "WEBP", "TIFF")
    (batch,) = data.from_images(given.images, encoded=True).create_tuple_iterator(output_numpy=True)
    np.testing.assert_array_equal(batch[0][1], batch[0][0])
    np.testing.assert_array_equal(batch[0][2], batch[0][0])


@pytest.mark.parametrize("inside", [[], ["notes.txt"]])
def test_a_training_class_folder_with_no_image_is_refused_before_work(tmp_path, inside):
    root = solid_tree(tmp_path / "data", train=2, val=1)
    (root / "train" / "empty").mkdir()
    for name in inside:
        (root / "train" / "empty" / name).write_text("no image")
    with pytest.raises(DataError) as refused:
        ImageFolder(root=str(root), image_size=32, num_classes=4).check()
    said = str(refused.value)
    assert said.startswith(f"{root / 'train'}: class folder(s) empty hold no image"), said
    assert ("1 other files there left out" in said) == bool(inside) and "\n" not in said


def test_a_job_on_a_class_of_only_unread_files_exits_2_in_one_line(tmp_path):
    root = solid_tree(tmp_path / "data", train=2, val=1)
    shutil.rmtree(root / "train" / "2")
    (root / "train" / "2").mkdir()
    (root / "train" / "2" / "readme.md").write_text("images to come")
    proc = run_train_here([*FOLDER_JOB, f"dataset.root={root}"], tmp_path)
    assert proc.returncode == 2
    lines = [x for x in proc.stderr.strip().splitlines() if "hold no image" in x]
    assert len(lines) == 1 and f"{root / 'train'}: class folder(s) 2 hold no image" in lines[0]
    assert not (tmp_path / "mlflow.db").exists()


def test_a_file_rewritten_with_its_size_and_mtime_put_back_is_checked_again(tmp_path):
    """`touch -d` puts the modification time back, never the change time: the record of
    checked images keys on it, so the damaged file is refused, not handed to the decoder."""
    root = solid_tree(tmp_path / "data", train=2, val=1)
    ImageFolder(root=str(root), image_size=32, num_classes=3).check()
    victim = root / "train" / "10" / "1.jpg"
    stat = victim.stat()
    good = victim.read_bytes()
    with open(victim, "r+b") as f:  # in place: same inode, same size
        f.write(good[:300] + b"\x00" * (len(good) - 300))
    os.utime(victim, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert victim.stat().st_size == stat.st_size and victim.stat().st_mtime_ns == stat.st_mtime_ns
    with pytest.raises(DataError, match="1.jpg: not a readable image"):
        ImageFolder(root=str(root), image_size=32, num_classes=3).check()
    records = list((tmp_path / "cache" / "sporeflow" / "image-checks").glob("*.json"))
    entries = [e for r in records for e in json.loads(r.read_text()).values()]
    assert all(len(e) == 6 for e in entries)  # inode, size, mtime, ctime; format, side


def test_class_names_round_trip_in_both_checkpoint_formats(tmp_path):
    from mindspore import nn

    network = nn.Dense(3, 2)
    for fmt in ("ckpt", "safetensors"):
        path = save_atomic(network, tmp_path / f"w.{fmt}", class_names_entry(["b", "a", "é"]))
        assert stored_class_names(path) == ["b", "a", "é"]
        assert stored_class_names(save_atomic(network, tmp_path / f"n.{fmt}")) is None


def test_the_csv_of_a_prediction_names_its_probabilities():
    from sporeflow.job.predict import Prediction, csv_text

    text = csv_text(Prediction(("x.png",), np.array([[0.25, 0.75]]), ("10", "2")))
    assert list(csv.reader(io.StringIO(text))) == [
        ["file", "label", "class", "p_10", "p_2"],
        ["x.png", "1", "2", "0.25", "0.75"],
    ]
