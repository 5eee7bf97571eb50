"""A sampler whose order is a pure function of (seed, epoch): resumable and shard-consistent.

MindSpore's built-in shuffle draws each epoch's order from one RNG stream, so a run resumed
at epoch e (Model.train(initial_epoch=e)) replays epoch 1's order and cannot match an
uninterrupted run. Here epoch e's permutation is RandomState(seed + e) whatever happened
before; MindSpore calls __iter__ once per epoch on its copy of the sampler.
Every rank draws the same permutation and takes every num_shards-th index from shard_id,
padding by wrap-around so all shards have the same length (like DistributedSampler).
Given `rows` (the stored rows of a split held out of, or left by, a validation split:
data.splits) it orders positions 0..len(rows)-1 so and yields the stored row at each: a
subset's order is as resumable and shard-consistent as a whole split's.
"""

from __future__ import annotations

import math

import mindspore.dataset as mds
import numpy as np


class EpochSampler(mds.Sampler):
    def __init__(
        self,
        num_rows: int,
        seed: int,
        shuffle: bool = True,
        start_epoch: int = 0,
        num_shards: int | None = None,
        shard_id: int | None = None,
        rows: np.ndarray | None = None,
    ):
        if rows is not None and len(rows) != num_rows:
            raise ValueError(f"{len(rows)} rows for a sampler of {num_rows}")
        self.num_rows = num_rows
        self.rows = rows
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = start_epoch
        self.num_shards = num_shards or 1
        self.shard_id = shard_id or 0
        self.per_shard = math.ceil(num_rows / self.num_shards)
        super().__init__(num_samples=self.per_shard)  # after the fields: it may ask len()

    def epoch_indices(self, epoch: int) -> np.ndarray:
        """The stored-row indices this shard reads in `epoch` (0-based)."""
        order = (
            np.random.RandomState((self.seed + epoch) % 2**32).permutation(self.num_rows)
            if self.shuffle
            else np.arange(self.num_rows)
        )
        total = self.per_shard * self.num_shards
        order = np.resize(order, total)  # wrap-around padding
        positions = order[self.shard_id :: self.num_shards]
        return positions if self.rows is None else self.rows[positions]

    def __iter__(self):
        indices = self.epoch_indices(self.epoch)
        self.epoch += 1
        # MindSpore's Sampler.get_indices (which calls this once per epoch) keeps each epoch's
        # list of batch sizes (all 0 for a sampler of single indices) and never drops it: 8
        # bytes per row per epoch for the life of the pipeline (the soak, BENCHMARKS table
        # 16). Every list is the same, so keeping the last one loses nothing (at most two live).
        del self.batch_sizes[:-1]
        return iter(indices.tolist())

    def __len__(self) -> int:
        return self.per_shard
