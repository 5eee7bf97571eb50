"""What each augmentation recipe (`augment.ops`, and `augment.mix`'s batch mixing) costs per
training image: the training split's pipeline of a CIFAR-sized data set (32 x 32 RGB, random pixels, the data set's own
transforms otherwise) read to the end without a network, once per recipe, in turn, several
repetitions; the figure is the median time per image and its ratio to no recipe.
Usage: python bench/bench_augment.py [images] [repeats]
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")

import mindspore.dataset as mds

from sporeflow.data.synthetic import Synthetic

RECIPES: dict[str, tuple[tuple[str, ...], str | None]] = {  # (augment.ops, augment.mix)
    "none": ((), None),
    "randaugment": (("randaugment",), None),
    "autoaugment": (("autoaugment",), None),
    "trivialaugment": (("trivialaugment",), None),
    "random_erasing": (("random_erasing",), None),
    "trivialaugment + random_erasing": (("trivialaugment", "random_erasing"), None),
    "mix=mixup": ((), "mixup"),
    "mix=cutmix": ((), "cutmix"),
    "trivialaugment + random_erasing + cutmix": (("trivialaugment", "random_erasing"), "cutmix"),
}


def seconds_per_image(recipe: tuple[tuple[str, ...], str | None], images: int) -> float:
    mds.config.set_seed(0)
    data = Synthetic(batch_size=64, image_size=32, channels=3, num_samples=images, test_samples=8)
    data.recipe, mix = recipe
    data.mix = (mix, 1.0) if mix else None
    start = time.perf_counter()
    for _ in data.create("train").create_tuple_iterator(num_epochs=1, output_numpy=True):
        pass
    return (time.perf_counter() - start) / images


def main() -> None:
    images = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    found: dict[str, list[float]] = {name: [] for name in RECIPES}
    for _ in range(repeats):
        for name, recipe in RECIPES.items():
            found[name].append(seconds_per_image(recipe, images))
    base = statistics.median(found["none"])
    print(
        f"training pipeline, {images} images 32 x 32 x 3, batch 64, 1 parallel worker, "
        f"median of {repeats}, {os.cpu_count()} cores:"
    )
    print(f"  {'augment.ops / mix':42s} {'us/image':>9s} {'images/s':>9s} {'x none':>7s}")
    for name, times in found.items():
        t = statistics.median(times)
        print(f"  {name:42s} {t * 1e6:9.1f} {1 / t:9.0f} {t / base:7.2f}")


if __name__ == "__main__":
    main()
