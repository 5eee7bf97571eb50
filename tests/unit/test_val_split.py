"""The validation split (issue 61): held out of the stored training split, stratified by class,
drawn by dataset.split_seed (never the training seed), read through real MindSpore pipelines
on files written here in the real formats (IDX, PNG folders)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from PIL import Image

from helpers.formats import write_idx
from sporeflow.core.errors import DataError
from sporeflow.data.idx import IdxImages
from sporeflow.data.image_folder import ImageFolder
from sporeflow.data.sampling import EpochSampler
from sporeflow.data.splits import held_out
from sporeflow.stage import provenance


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """The record of checked images (data.readable) in this test's own cache folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def numbered_idx(root, train_labels, test_labels):
    """IDX files whose image i carries i in its first two pixels (i // 250, i % 250): a row
    read through a pipeline names itself. Test rows are numbered from 50,000."""
    for split, labels, first in (("train", train_labels, 0), ("test", test_labels, 50_000)):
        ids = np.arange(first, first + len(labels))
        images = np.zeros((len(labels), 28, 28), np.uint8)
        images[:, 0, 0], images[:, 0, 1] = ids // 250, ids % 250
        write_idx(root, split, images, labels, gz=False)
    return root


def idx_set(root, **keys) -> IdxImages:
    return IdxImages(root=str(root), batch_size=32, image_size=28, mean=0.0, std=1.0, **keys)


def read(data, split, **create) -> tuple[np.ndarray, np.ndarray]:
    """(row ids, labels) of every image `data.create(split)` yields, in order."""
    ids, labels = [], []
    for images, batch_labels in data.create(split, **create).create_tuple_iterator(
        output_numpy=True, num_epochs=1
    ):
        pixels = np.rint(images[:, 0, 0, :2] * 255).astype(np.int64)
        ids.append(pixels[:, 0] * 250 + pixels[:, 1])
        labels.append(batch_labels)
    return np.concatenate(ids), np.concatenate(labels)


@pytest.fixture
def skewed(tmp_path):
    """600 training images in 10 classes of unequal sizes (one class of 2), 100 test images."""
    rng = np.random.default_rng(4)
    sizes = [150, 120, 90, 70, 60, 40, 30, 20, 18, 2]
    train = rng.permutation(np.repeat(np.arange(10), sizes))
    return numbered_idx(tmp_path / "idx", train, rng.integers(0, 10, 100))


def hamilton(total: int, counts: np.ndarray) -> np.ndarray:
    """Largest remainder in exact fractions, then one of every class of two or more."""
    quotas = [Fraction(total * int(c), int(counts.sum())) for c in counts]
    seats = [q.numerator // q.denominator for q in quotas]
    by_remainder = sorted(range(len(counts)), key=lambda k: (-(quotas[k] - seats[k]), k))
    for k in by_remainder[: total - sum(seats)]:
        seats[k] += 1
    return np.maximum(seats, (counts >= 2).astype(int))


@pytest.mark.parametrize("val_split, total", [(0.1, 60), (0.25, 150), (37, 37), (5, 5)])
def test_the_held_out_images_are_stratified_by_class(skewed, val_split, total):
    data = idx_set(skewed, val_split=val_split, split_seed=3)
    stored = data.stored_labels("train")
    ids, labels = read(data, "val")
    counts = np.bincount(stored, minlength=10)
    expected = hamilton(total, counts)
    assert np.array_equal(np.bincount(labels, minlength=10), expected)
    assert np.array_equal(labels, stored[ids]), "the labels read are the rows' own"
    assert (expected[counts >= 2] >= 1).all() and len(ids) == expected.sum()
    assert data.num_rows("val") == len(ids) and data.num_rows("train") == 600 - len(ids)


def test_the_same_images_are_held_out_whatever_the_training_seed_or_instance(skewed):
    first = read(idx_set(skewed, split_seed=1), "val", seed=1)
    again = read(idx_set(skewed, split_seed=1), "val", seed=2)
    assert np.array_equal(first[0], again[0])
    assert np.array_equal(idx_set(skewed, split_seed=1).held_out(), np.sort(first[0]))
    other = idx_set(skewed, split_seed=2).held_out()
    assert len(other) == len(first[0]) and not np.array_equal(other, np.sort(first[0]))


def test_the_same_images_are_held_out_for_two_composed_jobs(compose_cfg):
    from hydra.utils import instantiate

    jobs = [compose_cfg(["dataset=synthetic", f"seed={seed}"]) for seed in (1, 2)]
    held = [instantiate(cfg.dataset).held_out() for cfg in jobs]
    assert jobs[0].dataset.val_split == 0.1 and jobs[0].dataset.split_seed == 0
    assert len(held[0]) and np.array_equal(held[0], held[1])


def test_validation_and_training_split_the_stored_training_images(skewed):
    data = idx_set(skewed)
    train, _ = read(data, "train", shuffle=False, augment=False)
    shuffled, _ = read(data, "train", seed=5)
    val, _ = read(data, "val")
    test, _ = read(data, "test")
    assert not set(train) & set(val)
    assert np.array_equal(np.sort(np.concatenate([train, val])), np.arange(600))
    assert np.array_equal(np.sort(shuffled), train) and not np.array_equal(shuffled, train)
    assert np.array_equal(test, np.arange(50_000, 50_100))


def test_a_subset_holds_validation_out_of_its_own_images(skewed):
    data = idx_set(skewed, num_samples=200)
    train, _ = read(data, "train", shuffle=False)
    val, val_labels = read(data, "val")
    assert np.array_equal(np.sort(np.concatenate([train, val])), np.arange(200))
    assert len(val) == data.num_rows("val") >= 20
    assert np.array_equal(val_labels, data.stored_labels("train")[val])


def test_steps_per_epoch_fall_as_the_validation_split_grows(skewed):
    steps = [
        idx_set(skewed, val_split=v).create("train").get_dataset_size() for v in (0, 0.1, 0.3, 300)
    ]
    assert steps == [19, 17, 14, 10]  # ceil((600 - held out) / 32)


def test_no_validation_split_reads_the_test_split_for_choices(skewed):
    data = idx_set(skewed, val_split=0)
    assert data.selection_split == "test" and len(data.held_out()) == 0
    assert np.array_equal(read(data, "val")[0], read(data, "test")[0])
    assert data.num_rows("val") == 100 and data.num_rows("train") == 600
    assert data.source("val") == data.source("test")
    assert idx_set(skewed).selection_split == "val"


def test_the_record_names_the_held_out_rows(skewed):
    data, other = idx_set(skewed, split_seed=0), idx_set(skewed, split_seed=1)
    selection = data.source("val").selection
    assert f"val_split=0.1 split_seed=0 held out {len(data.held_out())} rows" in selection
    assert data.source("train").selection.endswith("the rest")
    assert selection != other.source("val").selection
    assert provenance.data_digest(data) != provenance.data_digest(other)
    assert provenance.data_digest(data) == provenance.data_digest(idx_set(skewed, split_seed=0))


BAD = {
    -0.1: "must not be negative",
    1.5: "a fraction must be below 1",
    600: "holds out 600 of the training split's 600 images and leaves it empty",
    599: "holds out every training image of class(es)",
    float("nan"): "allowed: a fraction in (0, 1)",
    "ten": "allowed: a fraction in (0, 1)",
}


@pytest.mark.parametrize("value", list(BAD), ids=str)
def test_a_bad_validation_split_is_refused_with_the_key_named(skewed, value):
    with pytest.raises(DataError, match=r"^dataset\.val_split=") as refused:
        idx_set(skewed, val_split=value).check()
    assert BAD[value] in str(refused.value) and "\n" not in str(refused.value)


def test_a_validation_split_that_holds_out_nothing_is_refused():
    labels = np.arange(5)  # five classes of one image: nothing can be held out
    with pytest.raises(DataError, match="dataset.val_split=0.1 holds out no image"):
        held_out(labels, 0.1, 0)
    assert len(held_out(labels, 0, 0)) == 0


def test_a_held_out_split_is_sorted_int64_rows_of_the_seeds_draw():
    labels = np.random.default_rng(0).integers(0, 3, 90)
    rows = held_out(labels, 9, split_seed=7)
    assert rows.dtype == np.int64 and np.array_equal(rows, np.sort(rows))
    assert np.array_equal(np.bincount(labels[rows], minlength=3), hamilton(9, np.bincount(labels)))
    assert np.array_equal(rows, held_out(labels, 9.0, split_seed=7))


def test_a_sharded_resumed_sampler_over_rows_reads_what_an_uninterrupted_one_does():
    rows = np.array([3, 8, 9, 14, 20, 21, 40, 41, 42, 77, 90])
    whole = EpochSampler(len(rows), seed=5, rows=rows)
    epochs = [list(whole) for _ in range(4)]
    assert all(sorted(e) == rows.tolist() for e in epochs) and epochs[0] != epochs[1]
    shards = [
        EpochSampler(len(rows), 5, True, 2, num_shards=2, shard_id=r, rows=rows) for r in (0, 1)
    ]
    for epoch in (2, 3):
        got = [list(shard) for shard in shards]
        assert set(got[0]) | set(got[1]) == set(rows.tolist())
        interleaved = [i for pair in zip(*got, strict=True) for i in pair][: len(rows)]
        assert interleaved == epochs[epoch]
    positions = EpochSampler(len(rows), seed=5).epoch_indices(1)
    assert (
        EpochSampler(len(rows), 5, rows=rows).epoch_indices(1).tolist() == rows[positions].tolist()
    )


def png_tree(root, counts: dict[str, dict[str, int]], first: int = 0) -> int:
    """PNG folders (split -> class -> images); image n (numbered from `first` in listing order)
    is 8 x 8 of red n // 250, green n % 250, so a row read through a pipeline names itself."""
    n = first
    for split, classes in counts.items():
        for name, count in classes.items():
            (root / split / name).mkdir(parents=True, exist_ok=True)
            for i in range(count):
                colour = (n // 250, n % 250, 0)
                Image.new("RGB", (8, 8), colour).save(root / split / name / f"{i}.png")
                n += 1
    return n


def folder_set(root, **keys) -> ImageFolder:
    return ImageFolder(
        root=str(root), batch_size=8, image_size=8, num_classes=3, mean=0, std=1, **keys
    )


def read_folder(data, split) -> tuple[np.ndarray, np.ndarray]:
    """(image ids, labels) of `split` read in order as it is evaluated."""
    ids, labels = [], []
    for images, batch_labels in data.create(split, shuffle=False).create_tuple_iterator(
        output_numpy=True, num_epochs=1
    ):
        pixels = np.rint(images[:, :2, 4, 4] * 255).astype(np.int64)
        ids.append(pixels[:, 0] * 250 + pixels[:, 1])
        labels.append(batch_labels)
    return np.concatenate(ids), np.concatenate(labels)


def test_an_image_folder_with_train_val_and_test_maps_them_one_to_one(tmp_path):
    classes = {"a": 4, "b": 5, "c": 3}
    first = png_tree(tmp_path, {"train": classes})
    after_val = png_tree(tmp_path, {"val": {"a": 2, "c": 2}}, first)
    png_tree(tmp_path, {"test": {"a": 1, "b": 3, "c": 2}}, after_val)
    data = folder_set(tmp_path, val_split=0.5)  # unused: the folder stores its validation split
    data.check()
    assert data.stored_splits() == ("train", "val", "test") and data.selection_split == "val"
    assert [data.num_rows(s) for s in ("train", "val", "test")] == [12, 4, 6]
    for split, ids, labels in (
        ("train", range(0, 12), [0] * 4 + [1] * 5 + [2] * 3),
        ("val", range(12, 16), [0, 0, 2, 2]),  # no b: labelled by train/'s numbering
        ("test", range(16, 22), [0, 1, 1, 1, 2, 2]),
    ):
        got_ids, got_labels = read_folder(data, split)
        assert np.array_equal(np.sort(got_ids), list(ids)), split
        assert got_labels.tolist() == labels == data.labels(split).tolist(), split


def test_the_two_folder_layout_holds_validation_out_of_train(tmp_path):
    png_tree(tmp_path, {"train": {"a": 10, "b": 10, "c": 10}, "val": {"a": 2, "b": 2, "c": 2}})
    data = folder_set(tmp_path)
    data.check()
    assert [data.num_rows(s) for s in ("train", "val", "test")] == [27, 3, 6]
    val, val_labels = read_folder(data, "val")
    train, _ = read_folder(data, "train")
    assert np.array_equal(np.sort(np.concatenate([train, val])), np.arange(30))
    assert np.array_equal(val, data.held_out()) and val_labels.tolist() == [0, 1, 2]
    assert np.array_equal(np.sort(read_folder(data, "test")[0]), np.arange(30, 36))


def test_image_folder_labels_follow_its_reading_order(tmp_path):
    """The folder listing's labels, read back through the split's MindSpore source with a
    sequential sampler and decoded: class folders made out of order, names that sort
    differently as text and as numbers, several extensions and a file it leaves out."""
    from mindspore.dataset import vision

    root = tmp_path / "train"
    n = 0
    for name in ("zeta", "Alpha", "mid", "b_2", "b_10"):
        (root / name).mkdir(parents=True)
        for stem, ext in (("10", ".png"), ("2", ".PNG"), ("a", ".png"), ("B", ".png")):
            Image.new("RGB", (8, 8), (n, 0, 0)).save(root / name / f"{stem}{ext}", "PNG")
            n += 1
        (root / name / "notes.txt").write_text("not an image")
    (tmp_path / "val" / "mid").mkdir(parents=True)
    Image.new("RGB", (8, 8), (n, 0, 0)).save(tmp_path / "val" / "mid" / "0.png")
    data = ImageFolder(root=str(tmp_path), num_classes=5, val_split=0)
    listing = data.stored_labels("train")
    reader = data._source("train", EpochSampler(len(listing), 0, shuffle=False))
    reader = reader.map(vision.Decode(), input_columns="image")
    read_back = list(reader.create_tuple_iterator(output_numpy=True, num_epochs=1))
    assert [int(label) for _, label in read_back] == listing.tolist()
    assert data.class_names() == ["Alpha", "b_10", "b_2", "mid", "zeta"]
    colours = [int(image[0, 0, 0]) for image, _ in read_back]
    assert len(colours) == len(listing) == 20 and sorted(colours) == list(range(20))
    assert colours != sorted(colours), "the folders were made in another order than read"
    for (_, label), colour in zip(read_back, colours, strict=True):  # made 4 per folder
        made_in = ("zeta", "Alpha", "mid", "b_2", "b_10")[colour // 4]
        assert data.class_names()[int(label)] == made_in


def test_the_split_is_part_of_every_reuse_and_finished_job_key(compose_cfg):
    """The dataset node is in stage 1's reuse key and in a sweep job's key whole: val_split and
    split_seed with it (the training seed is a key of its own)."""
    from sporeflow.job.finished_jobs import job_key
    from sporeflow.job.reuse import stage1_config

    made = {"data": "same"}
    cfgs = [
        compose_cfg(["dataset=synthetic", *keys])
        for keys in ([], ["dataset.split_seed=1"], ["dataset.val_split=0.2"])
    ]
    assert len({stage1_config(cfg) for cfg in cfgs}) == 3
    assert len({job_key(cfg, made) for cfg in cfgs}) == 3


def test_the_worker_layout_is_part_of_stage_1s_reuse_key(compose_cfg):
    """A data-parallel stage 1 is not stand-alone's (each epoch's last batch is split unevenly,
    the shards padded: issue 76), so neither reuses the other's; the nodes the workers run on
    and where the master listens do not change the weights and stay out of the key."""
    from sporeflow.job.reuse import stage1_config

    base = ["boost=dim_reduce"]
    keys = [
        [],
        ["parallel=data2"],
        ["parallel=data8"],
        ["parallel=data2", "parallel.gradients_mean=false"],
    ]
    digests = [stage1_config(compose_cfg([*base, *k])) for k in keys]
    assert len(set(digests)) == len(keys)
    elsewhere = compose_cfg([*base, "parallel=data2", "parallel.master_port=29500"])
    assert stage1_config(elsewhere) == digests[1]
