"""Why sporeflow refuses MS_COMPILER_CACHE_ENABLE=1 (issue 36 asked whether MindSpore's compile
cache could save a sweep's repeated graph compiles): MindSpore 2.10 finds a cached graph by its
place in the process's compile order and a hash of the entry script's source files, not by the
graph, so a second process that compiles another graph first is handed the first one's. Two real
processes, each compiling one graph; if a MindSpore release keys the cache by the graph, this
test fails and the refusal (runtime.mindspore_context.refuse_compile_cache) can go."""

from __future__ import annotations

import os
import subprocess
import sys

ONE_GRAPH = """
import sys
import numpy as np
import mindspore as ms
from mindspore import nn

ms.set_context(mode=ms.GRAPH_MODE)


class AddOne(nn.Cell):
    def construct(self, x):
        return x + 1


class Double(nn.Cell):
    def construct(self, x):
        return x * 2


net = AddOne() if sys.argv[1] == "add_one" else Double()
print(net(ms.Tensor(np.array([3.0], np.float32))).asnumpy()[0])
"""


def computed(script, graph: str, cache=None) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MS_COMPILER_CACHE")}
    if cache is not None:
        env.update(MS_COMPILER_CACHE_ENABLE="1", MS_COMPILER_CACHE_PATH=str(cache))
    proc = subprocess.run(
        [sys.executable, str(script), graph], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return float(proc.stdout.split()[-1])


def test_the_compile_cache_hands_a_process_another_graphs_result(tmp_path):
    script = tmp_path / "one_graph.py"
    script.write_text(ONE_GRAPH)
    assert computed(script, "double") == 6.0  # without the cache
    assert computed(script, "add_one", cache=tmp_path / "cache") == 4.0  # fills it
    assert computed(script, "double", cache=tmp_path / "cache") == 4.0, (
        "MindSpore now tells graphs apart in its compile cache: the refusal can go"
    )
