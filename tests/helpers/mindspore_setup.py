"""MindSpore process set-up shared by the tests that build cells in-process."""

from __future__ import annotations


def graph_mode_on_cpu() -> None:
    """GRAPH_MODE on the CPU; the device can be set once per process, before the first kernel."""
    import mindspore as ms

    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        ms.set_device("CPU")
    except RuntimeError:  # already running on the default device, which is the CPU here
        pass
