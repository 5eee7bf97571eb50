"""Inputs from the field (issue 60), several instances of each kind: image files MindSpore's
decoder cannot read are refused before work; relative paths are the launch folder's under
`hydra.job.chdir=true`; `sporeflow predict` feeds the network what training would."""

from __future__ import annotations

import io
import json
import os
import shutil

import numpy as np
import pytest
from omegaconf import OmegaConf
from PIL import Image

from helpers.formats import write_idx
from helpers.inprocess import run_train_here
from helpers.train import IMAGE_FOLDER_JOB as FOLDER_JOB
from sporeflow.config.paths import from_launch_dir
from sporeflow.core.errors import DataError
from sporeflow.data.image_folder import ImageFolder


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """The record of checked images (data.readable) in this test's own cache folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def image_tree(root, train=6, val=3):
    """A 3-class image folder of solid-colour 40 x 40 JPEGs (train/ and val/)."""
    for split, count in (("train", train), ("val", val)):
        for k, name in enumerate("abc"):
            (root / split / name).mkdir(parents=True)
            colour = [0, 0, 0]
            colour[k] = 250
            for i in range(count):
                Image.new("RGB", (40, 40), tuple(colour)).save(root / split / name / f"{i}.jpg")
    return root


def _jpeg() -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (40, 40, 3), np.uint8)).save(
        out, "JPEG"
    )
    return out.getvalue()


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (40, 40), (9, 99, 199)).save(out, "PNG")
    return out.getvalue()


def _ico() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (40, 40)).save(out, "ICO")
    return out.getvalue()


DAMAGED = {  # file name in train/b -> its bytes, each a file named as an image and none
    "first_300_bytes.jpg": _jpeg()[:300],  # SIGFPE inside vision.Decode (issue 60)
    "half.jpg": _jpeg()[: len(_jpeg()) // 2],
    "empty.jpg": b"",
    "text.jpg": b"not an image at all\n" * 10,
    "cut.png": _png()[:60],
    "ico_named.png": _ico(),  # a format not read, named as one that is
}


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_an_image_the_decoder_cannot_read_is_named_before_work(tmp_path, name):
    root = image_tree(tmp_path / "data")
    bad = root / "train" / "b" / name
    bad.write_bytes(DAMAGED[name])
    with pytest.raises(DataError) as refused:
        ImageFolder(root=str(root), image_size=32, num_classes=3).check()
    assert str(refused.value).startswith(f"{bad}: ")
    assert "\n" not in str(refused.value)


def test_a_training_job_with_a_truncated_jpeg_exits_2_with_one_line(tmp_path):
    root = image_tree(tmp_path / "data")
    bad = root / "train" / "b" / "0.jpg"
    bad.write_bytes(_jpeg()[:300])
    proc = run_train_here([*FOLDER_JOB, f"dataset.root={root}"], tmp_path)
    assert proc.returncode == 2
    assert f"{bad}: not a readable image" in proc.stderr
    assert not (tmp_path / "mlflow.db").exists()  # refused before a run was made


def test_checked_images_are_decoded_again_only_when_they_change(tmp_path):
    root = image_tree(tmp_path / "data")
    data = ImageFolder(root=str(root), image_size=32, num_classes=3)
    data.check()
    records = (tmp_path / "cache" / "sporeflow" / "image-checks").glob("*.json")
    kept = sorted(len(json.loads(r.read_text())) for r in records)
    assert kept == [3 * 3, 3 * 6]  # one record per split: val's and train's files
    data.check()  # nothing changed: passes on the record
    changed = root / "train" / "c" / "1.jpg"
    changed.write_bytes(_jpeg()[:300])
    os.utime(changed, ns=(1, 1))
    with pytest.raises(DataError, match="1.jpg: not a readable image"):
        data.check()


# --- relative paths under hydra.job.chdir=true -----------------------------------------------


def test_relative_path_options_are_the_launch_folders(tmp_path):
    launch = tmp_path / "launch"
    (launch / "runs" / "one").mkdir(parents=True)
    cfg = OmegaConf.create(
        {
            "dataset": {"root": "data", "cache_dir": "~/c"},
            "runtime": {"compile_cache_dir": "./cc"},
            "boost": {"pca_mat_path": "basis.npy", "stage1_run": "0123abcd"},
            "train": {"init_from": "runs/one"},
            "resume": False,
            "parallel": {"strategy_ckpt_config": {"load_file": "", "save_file": "s.ckpt"}},
        }
    )
    from_launch_dir(cfg, launch)
    assert cfg.dataset.root == str(launch / "data")
    assert cfg.dataset.cache_dir == os.path.expanduser("~/c")
    assert cfg.runtime.compile_cache_dir == str(launch / "cc")
    assert cfg.boost.pca_mat_path == str(launch / "basis.npy")
    assert cfg.parallel.strategy_ckpt_config.save_file == str(launch / "s.ckpt")
    assert cfg.parallel.strategy_ckpt_config.load_file == ""
    assert cfg.train.init_from == str(launch / "runs" / "one")
    assert cfg.boost.stage1_run == "0123abcd"  # an MLflow run id, not a path here
    assert cfg.resume is False


def test_a_job_under_chdir_reads_its_relative_data_root_from_the_launch_folder(tmp_path):
    image_tree(tmp_path / "data", train=4, val=2)
    chdir = ["hydra.job.chdir=true", "dataset.root=data"]
    proc = run_train_here([*FOLDER_JOB, *chdir], tmp_path, run_dir="outputs/run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    shutil.rmtree(tmp_path / "data" / "val")
    refused = run_train_here([*FOLDER_JOB, *chdir], tmp_path, run_dir="outputs/again")
    assert refused.returncode == 2
    assert f"dataset.root={tmp_path / 'data'} lacks val/" in refused.stderr


# --- predict decodes as training does ----------------------------------------------------------


def _modes(rgb: np.ndarray) -> dict[str, Image.Image]:
    """The image in every mode Pillow writes as PNG or JPEG."""
    base = Image.fromarray(rgb)
    grey16 = Image.fromarray(rgb[:, :, 0].astype(np.uint16) * 257)
    found = {m: base.convert(m) for m in ("1", "L", "LA", "P", "RGB", "RGBA")}
    found["I;16"] = grey16
    found["P_transparent"] = base.convert("P")
    found["P_transparent"].info["transparency"] = 0
    return found


def test_predict_feeds_the_network_what_the_image_folders_eval_split_feeds_it(tmp_path):
    rgb = np.random.default_rng(1).integers(0, 256, (30, 26, 3), np.uint8)
    root = tmp_path / "data"
    for split in ("train", "val"):
        (root / split / "a").mkdir(parents=True)
    files = []
    for mode, image in _modes(rgb).items():
        files.append(f"{mode.replace(';', '_')}.png")
        image.save(root / "val" / "a" / files[-1])
    for mode in ("L", "RGB", "CMYK"):
        files.append(f"{mode}.jpg")
        Image.fromarray(rgb).convert(mode).save(root / "val" / "a" / files[-1])
    shutil.copy(root / "val" / "a" / "RGB.png", root / "train" / "a" / "0.png")
    data = ImageFolder(root=str(root), image_size=16, num_classes=1, batch_size=64)
    (trained,) = data.create("test", shuffle=False).create_tuple_iterator(output_numpy=True)

    from sporeflow.data.image_files import image_input

    given = image_input(root / "val" / "a", channels=3)
    assert sorted(given.names) == sorted(files)
    (predicted,) = data.from_images(given.images, encoded=given.encoded).create_tuple_iterator(
        output_numpy=True
    )
    order = np.argsort(given.names)  # the eval split reads its folder sorted, as image_input
    np.testing.assert_array_equal(predicted[0][order], trained[0])


def test_a_grey_data_sets_predictions_see_the_grey_training_array(tmp_path):
    """IDX images (what a grey data set trains on) written as image files in several modes:
    predict's pipeline gives the array the eval split gives for the same image."""
    from sporeflow.data.idx import IdxImages

    rng = np.random.default_rng(2)
    grey = rng.integers(0, 256, (4, 28, 28), np.uint8)
    write_idx(tmp_path / "idx", "train", grey, [0, 1, 2, 3])
    write_idx(tmp_path / "idx", "test", grey, [0, 1, 2, 3])
    data = IdxImages(root=str(tmp_path / "idx"), cache_dir=str(tmp_path / "c"), batch_size=4)
    (reference,) = data.create("test", shuffle=False).create_tuple_iterator(output_numpy=True)
    folder = tmp_path / "mine"
    folder.mkdir()
    for i, image in enumerate(grey):
        mode = ("L", "RGB", "I;16", "LA")[i]
        pil = Image.fromarray(image.astype(np.uint16) * 257) if mode == "I;16" else None
        (pil or Image.fromarray(image).convert(mode)).save(folder / f"{i}.png")

    from sporeflow.data.image_files import image_input

    given = image_input(folder, channels=1)
    (predicted,) = data.from_images(given.images, encoded=True).create_tuple_iterator(
        output_numpy=True
    )
    np.testing.assert_allclose(predicted[0], reference[0], atol=1e-6)


# --- one class numbering: the training split's ---------------------------------------------


def test_a_split_missing_a_class_is_labelled_by_the_training_splits_folders(tmp_path):
    """train/{a,b,c}, val/{a,c}: every val/c image is class 2 (MindSpore's own numbering of
    val's folders made it 1, and the run reported acc=0.5000 for a perfect network)."""
    root = image_tree(tmp_path / "data", train=4, val=3)
    shutil.rmtree(root / "val" / "b")
    data = ImageFolder(root=str(root), image_size=32, num_classes=3, batch_size=6)
    data.check()
    read = data.create("test", shuffle=False).create_tuple_iterator(output_numpy=True)
    images, labels = (np.concatenate(parts) for parts in zip(*read, strict=True))
    assert sorted(labels.tolist()) == [0, 0, 0, 2, 2, 2]
    for image, label in zip(images, labels, strict=True):  # class k is bright in channel k
        assert image.mean(axis=(1, 2)).argmax() == label


@pytest.mark.parametrize("extra", ["d", "zz"])
def test_a_split_with_a_class_the_training_split_lacks_is_refused(tmp_path, extra):
    root = image_tree(tmp_path / "data", train=2, val=1)
    shutil.copytree(root / "val" / "a", root / "val" / extra)
    with pytest.raises(DataError, match=f"class folder\\(s\\) {extra} not in the training split"):
        ImageFolder(root=str(root), image_size=32, num_classes=4).check()
