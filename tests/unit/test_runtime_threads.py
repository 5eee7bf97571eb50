"""`runtime.threads` in a process that runs several jobs (a sweep's basic launcher, a joblib
worker): MindSpore takes the thread count once per process."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import mindspore as ms
from sporeflow.core.errors import ConfigError
from sporeflow.runtime.mindspore_context import set_cpu_threads
try:
    ms.device_context.cpu.op_tuning.threads_num(1)
    ms.device_context.cpu.op_tuning.threads_num(1)
except RuntimeError as ex:
    print("mindspore refuses a second call:", ex)
"""


def test_mindspore_takes_the_thread_count_once_per_process():
    """The reason for set_cpu_threads: MindSpore itself refuses a second call."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
    assert "mindspore refuses a second call" in out.stdout, out.stderr[-2000:]


def test_the_same_count_again_is_a_no_op_and_another_one_names_the_key():
    code = """
from sporeflow.core.errors import ConfigError
from sporeflow.runtime.mindspore_context import set_cpu_threads
set_cpu_threads(1)
set_cpu_threads(1)
try:
    set_cpu_threads(2)
except ConfigError as ex:
    print(ex)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("runtime.threads=2: this process already runs MindSpore with 1")
