"""What images a network takes, found before any training: one forward pass of a zero image
(batch 1, eval mode) in PyNative mode, the mode put back after, runs MindSpore's own shape
inference layer by layer - a size the layers refuse (a Conv2d kernel larger than its input, a
Dense layer made for another size) fails here as it would in the first step. Milliseconds for
the small networks, about half a second for a ResNet-50 at 224; MindSpore's device must be
set first (it refuses `set_device` after a kernel ran)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator, Sequence


@contextlib.contextmanager
def pynative() -> Iterator[None]:
    """PyNative mode for the block (each op runs as it is called: no graph is compiled or
    cached), the mode before it put back after."""
    import mindspore as ms

    mode = ms.get_context("mode")
    try:
        ms.set_context(mode=ms.PYNATIVE_MODE)
        yield
    finally:
        ms.set_context(mode=mode)


def zero_forward(network, image_shape: Sequence[int]) -> tuple[int, ...]:
    """The network's output shape for one zero image of `image_shape` (C, H, W), in eval mode
    and PyNative; raises what MindSpore raises for an input its layers do not take. The output
    is read back: PyNative runs ops asynchronously, and an op's error left pending is raised
    by whatever next waits for MindSpore (an optimizer's constructor, a step)."""
    import mindspore as ms
    import numpy as np

    with pynative():
        network.set_train(False)
        out = network(ms.Tensor(np.zeros((1, *image_shape), np.float32)))
        return tuple(out.asnumpy().shape)


@contextlib.contextmanager
def native_stderr_quiet() -> Iterator[None]:
    """File descriptor 2 to /dev/null for the block: MindSpore's C++ half logs an op's failed
    shape inference there (`[CRITICAL] ... InferShape`) besides raising it, and a refusal is
    the one line the user reads. Python's own writes wait (sys.stderr flushed before)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def input_problem(network, image_shape: Sequence[int]) -> str | None:
    """Why the network does not take images of `image_shape` (the first line of MindSpore's
    message); None when it does."""
    try:
        with native_stderr_quiet():
            zero_forward(network, image_shape)
    except (ValueError, TypeError, RuntimeError) as ex:
        return next((line.strip() for line in str(ex).splitlines() if line.strip()), repr(ex))
    return None


def sizes_taken(network, channels: int, sizes: Sequence[int], seconds: float) -> list[int]:
    """The square image sizes among `sizes` the network takes, tried in order until `seconds`
    have passed (a refusal's hint: never a long search)."""
    until = time.monotonic() + seconds
    taken = []
    for size in sizes:
        if time.monotonic() > until:
            break
        if input_problem(network, (channels, size, size)) is None:
            taken.append(size)
    return taken


def spans(values: Sequence[int]) -> str:
    """Sorted whole numbers as runs: [3, 4, 5, 9] -> '3..5, 9'."""
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in runs)
