"""Data pipelines on the embedded digits and on IDX files written here in the real format."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers.formats import write_cifar_bin, write_idx, write_jpeg_tree
from helpers.machine import unavailable
from sporeflow.core.errors import DataError
from sporeflow.data.digits import Digits, digits_splits, load_digits_split
from sporeflow.data.idx import IdxImages, ensure_raw
from sporeflow.data.sampling import EpochSampler


def batches(dataset):
    return list(dataset.create_tuple_iterator(output_numpy=True))


def test_digits_split_is_stratified_and_complete():
    x_train, y_train = load_digits_split("train", 0.2)
    x_test, y_test = load_digits_split("test", 0.2)
    assert len(x_train) + len(x_test) == 1797
    assert x_train.shape[1:] == (8, 8, 1) and x_train.dtype == np.uint8
    assert x_train.max() == 255
    assert set(np.unique(y_test)) == set(range(10))


def test_the_cached_digits_split_is_scikit_learns_and_is_read_without_importing_it(
    tmp_path, monkeypatch
):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    digits_splits.cache_clear()
    made = [load_digits_split(split, 0.25) for split in ("train", "test")]
    (cached,) = (tmp_path / "sporeflow" / "digits").glob("split-*0.25.npz")
    digits = load_digits()
    _, _, y_train, y_test = train_test_split(
        digits.images, digits.target, test_size=0.25, random_state=0, stratify=digits.target
    )
    assert np.array_equal(made[0][1], y_train) and np.array_equal(made[1][1], y_test)
    code = (
        "import sys; from sporeflow.data.digits import load_digits_split as f; "
        "x, y = f('test', 0.25); print(len(y), 'sklearn' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)},
    ).stdout.split()
    assert out == [str(len(y_test)), "False"], cached
    digits_splits.cache_clear()


def test_the_digits_split_is_made_when_no_cache_can_be_kept(tmp_path, monkeypatch):
    blocked = tmp_path / "a-file"  # the cache's parent is a file: no folder can be made
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    digits_splits.cache_clear()
    try:
        x_test, y_test = load_digits_split("test", 0.2)
    finally:
        digits_splits.cache_clear()
    assert len(x_test) == len(y_test) == 360 and x_test.shape[1:] == (8, 8, 1)


def test_digits_pipeline_shapes_and_normalisation():
    data = Digits(batch_size=16, image_size=32, mean=0.0, std=1.0)
    got = batches(data.create("test", shuffle=False))
    images, labels = got[0]
    # read in order: 360 images in 30 equal batches of 12, not 22 x 16 + 8 (the size that also
    # cuts the 144 validation images: common_even_batch_size; alone the test split would take 15)
    assert {len(b[1]) for b in got} == {12}
    assert {len(b[1]) for b in batches(data.create("val", shuffle=False))} == {12}
    assert images.shape == (12, 1, 32, 32) and images.dtype == np.float32
    assert labels.dtype == np.int32
    assert 0.0 <= images.min() and images.max() <= 1.0
    assert sum(len(b[1]) for b in got) == 360


def test_digits_shards_cover_the_split_once():
    data = Digits(batch_size=2000, mean=0.0, std=1.0)
    full_images, full_labels = batches(data.create("train", shuffle=False))[0]
    shards = [batches(data.create("train", num_shards=2, shard_id=r, seed=3))[0] for r in (0, 1)]
    n = len(full_labels)
    assert len(shards[0][1]) == len(shards[1][1]) == (n + 1) // 2
    seen = [img.tobytes() for shard in shards for img in shard[0]]
    assert {img.tobytes() for img in full_images} == set(seen)
    assert len(seen) - len(set(seen)) == (2 - n % 2) % 2  # only wrap-around padding repeats


def test_sampler_epoch_order_depends_only_on_seed_and_epoch():
    uninterrupted = EpochSampler(10, seed=5)
    orders = [list(uninterrupted) for _ in range(4)]
    assert len({tuple(o) for o in orders}) == 4  # reshuffled every epoch
    resumed = EpochSampler(10, seed=5, start_epoch=2)
    assert [list(resumed), list(resumed)] == orders[2:]
    assert list(EpochSampler(10, seed=5, shuffle=False)) == list(range(10))


def test_the_sampler_keeps_no_record_per_epoch_in_mindspores_get_indices():
    """MindSpore's engine calls Sampler.get_indices once per epoch; its base class keeps each
    epoch's batch sizes, so a long run grew by 8 bytes per row per epoch (the soak)."""
    sampler = EpochSampler(1000, seed=3)
    got = [sampler.get_indices() for _ in range(50)]
    assert len(sampler.batch_sizes) <= 2, "at most the last epoch's and this one's"
    for epoch in (0, 1, 49):
        assert got[epoch].tolist() == EpochSampler(1000, seed=3).epoch_indices(epoch).tolist()


def test_resumed_pipeline_replays_the_same_batches():
    data = Digits(batch_size=64, mean=0.0, std=1.0)
    run = data.create("train", seed=9)
    it = run.create_tuple_iterator(output_numpy=True, num_epochs=3)
    per_epoch = [[b[1].tolist() for b in it] for _ in range(3)]
    resumed = data.create("train", seed=9, start_epoch=2)
    assert [b[1].tolist() for b in resumed.create_tuple_iterator(output_numpy=True)] == per_epoch[2]
    assert per_epoch[0] != per_epoch[1]


def test_idx_gz_is_expanded_once_into_cache(idx_dir, tmp_path):
    cache = tmp_path / "cache"
    assert ensure_raw(idx_dir, cache) == cache
    first = (cache / "train-images-idx3-ubyte").stat().st_mtime_ns
    ensure_raw(idx_dir, cache)
    assert (cache / "train-images-idx3-ubyte").stat().st_mtime_ns == first
    with gzip.open(idx_dir / "train-images-idx3-ubyte.gz", "rb") as f:
        assert (cache / "train-images-idx3-ubyte").read_bytes() == f.read()


def test_idx_pipeline_reads_labels_and_pixels(idx_dir, tmp_path):
    data = IdxImages(
        root=str(idx_dir),
        cache_dir=str(tmp_path / "c"),
        batch_size=64,
        image_size=28,
        mean=0.0,
        std=1.0,
    )
    images, labels = batches(data.create("test", shuffle=False))[0]
    assert images.shape == (64, 1, 28, 28)
    for img, k in zip(
        images, labels, strict=False
    ):  # the generator painted band k of class k at 250/255
        assert img[0, 2 * k + 4].mean() == pytest.approx(250 / 255, abs=1e-6)


def test_idx_resized_for_lenet(idx_dir, tmp_path):
    data = IdxImages(root=str(idx_dir), cache_dir=str(tmp_path / "c"), batch_size=8, image_size=32)
    images, _ = batches(data.create("train"))[0]
    assert images.shape == (8, 1, 32, 32)


def test_idx_raw_files_read_in_place(tmp_path):
    root = tmp_path / "raw"
    write_idx(root, "train", np.zeros((4, 28, 28)), [1, 2, 3, 4], gz=False)
    write_idx(root, "test", np.zeros((2, 28, 28)), [5, 6], gz=False)
    assert ensure_raw(root, None) == root


def test_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="does not exist.*train-images-idx3-ubyte"):
        ensure_raw(tmp_path / "nope", tmp_path / "c")


def test_missing_file_is_named(idx_dir, tmp_path):
    (idx_dir / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError, match="lacks t10k-labels-idx1-ubyte"):
        ensure_raw(idx_dir, tmp_path / "c")


def test_not_idx_is_a_clear_error(tmp_path):
    root = tmp_path / "bad"
    write_idx(root, "train", np.zeros((4, 28, 28)), [1, 2, 3, 4], gz=False)
    write_idx(root, "test", np.zeros((2, 28, 28)), [5, 6], gz=False)
    (root / "t10k-images-idx3-ubyte").write_bytes(b"<html>not found</html>")
    data = IdxImages(root=str(root), batch_size=2)
    with pytest.raises(DataError, match="not an IDX file"):
        data.create("test")


def test_empty_split_is_a_clear_error(tmp_path):
    root = tmp_path / "empty"
    write_idx(root, "train", np.zeros((4, 28, 28)), [1, 2, 3, 4], gz=False)
    write_idx(root, "test", np.zeros((0, 28, 28)), [], gz=False)
    with pytest.raises(DataError, match="test split .* is empty"):
        IdxImages(root=str(root), batch_size=2).create("test")


def test_debian_fashion_mnist_package_reads(tmp_path):
    """The real Fashion-MNIST files from Debian's dataset-fashion-mnist (installed by .ci/run)."""
    root = "/usr/share/datasets/fashion-mnist"
    if not Path(root).is_dir():
        unavailable(f"{root}: Debian's dataset-fashion-mnist is not installed (optional: README)")
    data = IdxImages(
        root=root,
        cache_dir=str(tmp_path / "fm"),
        batch_size=100,
        image_size=32,
        num_samples=200,
        mean=0.2860,
        std=0.3530,
    )
    images, labels = batches(data.create("test", shuffle=False))[0]
    assert images.shape == (100, 1, 32, 32)
    assert set(labels) <= set(range(10)) and len(set(labels)) > 5
    assert (tmp_path / "fm" / "train-images-idx3-ubyte").stat().st_size == 16 + 60000 * 784


def test_cifar10_reads_binary_records_and_augments(tmp_path):
    from sporeflow.data.cifar import Cifar10

    root = tmp_path / "cifar-10-batches-bin"
    write_cifar_bin(root)
    data = Cifar10(root=str(root), batch_size=50, mean=(0, 0, 0), std=(1, 1, 1))
    assert data.stored_rows("train") == 50_000 and data.num_rows("test") == 10_000
    assert data.num_rows("train") == 45_000 and data.num_rows("val") == 5_000  # val_split=0.1
    images, labels = batches(data.create("test", shuffle=False))[0]
    assert images.shape == (50, 3, 32, 32)
    np.testing.assert_allclose(images[:, 0].mean(axis=(1, 2)), labels * 20 / 255, atol=1e-6)
    train_images, _ = next(data.create("train", seed=1).create_tuple_iterator(output_numpy=True))
    assert (train_images == 0).all(axis=1).any()  # RandomCrop's zero padding shows up


def test_cifar10_layout_errors(tmp_path):
    from sporeflow.data.cifar import Cifar10

    with pytest.raises(DataError, match="cifar-10-batches-bin folder"):
        Cifar10(root=str(tmp_path / "nope")).create("train")
    root = tmp_path / "partial"
    root.mkdir()
    (root / "test_batch.bin").write_bytes(b"\0" * 3073)
    with pytest.raises(DataError, match="lacks data_batch_1.bin"):
        Cifar10(root=str(root)).create("train")


def test_synthetic_any_shape():
    from sporeflow.data.synthetic import Synthetic

    data = Synthetic(batch_size=4, image_size=224, channels=3, num_samples=8, test_samples=4)
    images, labels = batches(data.create("train"))[0]
    assert images.shape == (4, 3, 224, 224) and labels.dtype == np.int32


def largest_divisor_reference(rows, batch_size):
    """Brute force: the largest b <= batch_size dividing rows, with b >= batch_size // 2 or b
    the whole split; else batch_size."""
    fits = [b for b in range(1, batch_size + 1) if rows % b == 0]
    fits = [b for b in fits if b >= batch_size // 2 or b == rows]
    return max(fits) if fits else batch_size


def test_an_even_batch_size_is_the_largest_divisor_of_the_split_near_the_batch():
    from sporeflow.data.base import even_batch_size

    assert even_batch_size(360, 32) == 30  # the digits test split: 12 batches of 30, not 11 + 8
    for rows in range(1, 400):
        for batch in (1, 2, 3, 7, 16, 32, 50):
            assert even_batch_size(rows, batch) == largest_divisor_reference(rows, batch), (
                rows,
                batch,
            )


def test_a_common_even_batch_size_is_the_largest_divisor_of_every_split_near_the_batch():
    """Against brute force: the largest b <= batch dividing every count, b >= batch // 2; None
    when there is none (each split then takes its own)."""
    import itertools
    import math

    from sporeflow.data.base import common_even_batch_size

    assert common_even_batch_size([144, 360], 32) == 24  # the digits val and test splits
    assert common_even_batch_size([143, 360], 32) is None  # gcd 1: each its own size
    for val, test in itertools.product(range(1, 90, 7), range(1, 200, 3)):
        for batch in (1, 3, 16, 32):
            fits = [
                b for b in range(1, batch + 1) if math.gcd(val, test) % b == 0 and b >= batch // 2
            ]
            want = max(fits) if fits else None
            assert common_even_batch_size([val, test], batch) == want, (val, test, batch)


def test_the_validation_and_test_splits_are_read_at_one_batch_size_where_one_cuts_both():
    from sporeflow.data.synthetic import Synthetic

    # 100 training images hold out 20 for validation; 72 test images: 20 and 72 share 4 only,
    # below half the batch, so each takes its own size; 24 validation images share 24 with 72
    for val_split, want in ((0.2, ({20}, {24})), (0.24, ({24}, {24}))):
        data = Synthetic(
            batch_size=32,
            image_size=8,
            channels=1,
            num_samples=100,
            test_samples=72,
            val_split=val_split,
        )
        got = tuple({len(y) for _, y in batches(data.create(s))} for s in ("val", "test"))
        assert got == want, (val_split, got)


def test_a_split_read_in_order_comes_in_equal_batches_and_training_keeps_its_batch():
    from sporeflow.data.synthetic import Synthetic

    data = Synthetic(
        batch_size=32, image_size=8, channels=1, num_samples=100, test_samples=72, val_split=0
    )
    assert [len(labels) for _, labels in batches(data.create("test"))] == [24, 24, 24]
    assert [len(labels) for _, labels in batches(data.create("train"))] == [32, 32, 32, 4]
    in_order = batches(data.create("train", shuffle=False, augment=False))
    assert [len(labels) for _, labels in in_order] == [25, 25, 25, 25]


def test_image_folder_tree_decodes_crops_and_labels(tmp_path):
    from sporeflow.data.image_folder import ImageFolder

    write_jpeg_tree(tmp_path, train=4, val=2)
    data = ImageFolder(
        root=str(tmp_path),
        batch_size=6,
        image_size=224,
        num_classes=3,
        mean=(0, 0, 0),
        std=(1, 1, 1),
    )
    assert data.stored_rows("train") == 12 and data.num_rows("test") == 6
    assert data.num_rows("train") == 9 and data.num_rows("val") == 3  # one of every class
    got = batches(data.create("test", shuffle=False))
    # 6 test and 3 validation images at batch 6: both read in batches of 3 (one eval graph)
    assert [b[0].shape for b in got] == [(3, 3, 224, 224)] * 2
    images, labels = (np.concatenate(parts) for parts in zip(*got, strict=True))
    for image, label in zip(
        images, labels, strict=False
    ):  # class k is the image whose channel k is bright
        assert image.mean(axis=(1, 2)).argmax() == label
    train_images, _ = batches(data.create("train", seed=0))[0]
    assert train_images.shape == (6, 3, 224, 224)
    # what `sporeflow predict` feeds the network: the same files decoded by MindSpore's
    # decoder, then the same resize and centre crop as the eval split: the same arrays
    from sporeflow.data.image_files import image_input

    assert data.class_names() == ["n01", "n02", "n03"]
    files = image_input(tmp_path / "val", channels=3)
    assert files.names[:2] == ("n01/0.JPEG", "n01/1.JPEG")
    (predicted,) = batches(data.from_images(files.images, encoded=files.encoded))
    np.testing.assert_array_equal(predicted[0], images)


def test_image_folder_layout_errors(tmp_path):
    from sporeflow.data.image_folder import ImageFolder

    with pytest.raises(DataError, match="lacks train/"):
        ImageFolder(root=str(tmp_path)).create("train")
    (tmp_path / "train" / "n01").mkdir(parents=True)
    with pytest.raises(DataError, match="holds no images"):
        ImageFolder(root=str(tmp_path)).create("train")


def first_train_batch(recipe: tuple[str, ...], split: str = "train", seed: int = 7):
    """The first batch of a small RGB data set with `augment.ops` = recipe, MindSpore's dataset
    seed fixed (what seed_everything sets in a job)."""
    import mindspore.dataset as mds

    from sporeflow.data.synthetic import Synthetic

    mds.config.set_seed(seed)
    data = Synthetic(batch_size=8, image_size=24, channels=3, num_samples=16, test_samples=8)
    data.recipe = recipe
    return batches(data.create(split, shuffle=False))[0]


@pytest.mark.parametrize("op", ["randaugment", "autoaugment", "trivialaugment", "random_erasing"])
def test_each_augmentation_changes_a_seeded_batch_deterministically(op):
    plain_images, plain_labels = first_train_batch(())
    images, labels = first_train_batch((op,))
    again, _ = first_train_batch((op,))
    assert images.shape == plain_images.shape and images.dtype == plain_images.dtype
    assert (labels == plain_labels).all()
    assert not np.array_equal(images, plain_images), f"{op} left the batch as it was"
    assert np.array_equal(images, again), f"{op} is not reproducible under one seed"
    other_seed, _ = first_train_batch((op,), seed=8)
    assert not np.array_equal(images, other_seed)


def test_the_eval_split_never_sees_a_recipe():
    plain, _ = first_train_batch((), split="test")
    recipe, _ = first_train_batch(("trivialaugment", "random_erasing"), split="test")
    assert np.array_equal(plain, recipe)


def test_augment_ops_reach_the_data_set_in_order(compose_cfg):
    from sporeflow.config.components import build_dataset
    from sporeflow.config.validation import validate

    cfg = validate(
        compose_cfg(
            [
                "dataset=synthetic",
                "dataset.channels=3",
                "augment.ops=[trivialaugment,random_erasing]",
            ]
        )
    )
    assert build_dataset(cfg).recipe == ("trivialaugment", "random_erasing")
    assert build_dataset(validate(compose_cfg())).recipe == ()


def test_a_job_trains_with_a_recipe_and_records_it(tmp_path):
    from mlflow.tracking import MlflowClient

    from helpers.inprocess import TINY, run_train_here

    args = [*TINY, "dataset.channels=3", "epochs=1", "augment.ops=[trivialaugment,random_erasing]"]
    proc = run_train_here(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("sporeflow").experiment_id])
    assert run.info.status == "FINISHED" and "final/val/acc" in run.data.metrics
    assert run.data.params["augment.ops"] == "['trivialaugment', 'random_erasing']"


def mixed_batches(kind: str, split: str = "train", **create) -> list[tuple[np.ndarray, np.ndarray]]:
    import mindspore.dataset as mds

    from sporeflow.data.synthetic import Synthetic

    mds.config.set_seed(7)
    data = Synthetic(
        batch_size=8, image_size=12, channels=3, num_samples=16, test_samples=8, val_split=0
    )
    data.mix = (kind, 1.0)
    return batches(data.create(split, shuffle=False, **create))


@pytest.mark.parametrize("mix", ["mixup", "cutmix"])
def test_mixed_batches_carry_soft_labels_that_mix_two_images_of_the_batch(mix):
    """Each label row is a mixture of at most two classes (weights >= 0, summing to 1) and the
    batch's images changed; the test split and mix=False keep integer labels and images."""
    (images, labels), _ = mixed_batches(mix)
    (plain, plain_labels), _ = mixed_batches(mix, mix=False)
    assert labels.dtype == np.float32 and labels.shape == (8, 10)
    assert (labels >= 0).all() and np.allclose(labels.sum(axis=1), 1.0)
    assert ((labels > 0).sum(axis=1) <= 2).all()
    sources = [set(np.flatnonzero(row)) for row in labels]
    assert all(
        int(label) in found or len(found) == 1
        for label, found in zip(plain_labels, sources, strict=True)
    )
    assert plain_labels.dtype == np.int32 and not np.array_equal(images, plain)
    ((test_images, test_labels),) = mixed_batches(mix, split="test")
    assert test_labels.dtype == np.int32


@pytest.mark.parametrize("mix", ["mixup", "cutmix"])
def test_a_job_trains_on_mixed_batches_and_evaluates_on_integer_labels(tmp_path, mix):
    from mlflow.tracking import MlflowClient

    from helpers.inprocess import TINY, run_train_here

    args = [*TINY, "epochs=1", f"augment.mix={mix}", "augment.mix_alpha=0.4", "loss=ce_smooth"]
    proc = run_train_here(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("sporeflow").experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["augment.mix"] == mix
    assert np.isfinite(run.data.metrics["final/val/loss"]) and "final/val/acc" in run.data.metrics


def test_a_dim_reduce_pipeline_trains_both_stages_on_mixed_batches(tmp_path):
    """Stage 1 and stage 2's quasi-Newton step take the soft-label loss; snapshot_mean's
    BatchNorm pass reads unmixed images."""
    from mlflow.tracking import MlflowClient

    from helpers.inprocess import TINY_PIPELINE, run_train_here

    args = [*TINY_PIPELINE, "augment.mix=mixup", "boost.baselines=[snapshot_mean]"]
    proc = run_train_here(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("sporeflow").experiment_id])
    stages = {r.data.tags["stage"]: r for r in runs}
    assert {"stage1", "stage2", "snapshot_mean"} <= set(stages)
    assert all(r.info.status == "FINISHED" for r in runs)
    assert np.isfinite(stages["stage2"].data.metrics["final/val/loss"])
