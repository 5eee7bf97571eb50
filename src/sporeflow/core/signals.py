"""Signals as exceptions, and processes that die with their parent.

SIGINT and SIGTERM raise `Interrupted` (a KeyboardInterrupt, so every MLflow run it passes
through ends KILLED) and the entry exits 128 + the signal number (130, 143); inside MindSpore's
training loop the first one is held to the end of the step (`deferred`). Note: MindSpore's
graph runtime (libmindspore_ms_backend) installs a C-level SIGINT handler of its own at every
graph step, which sends the process SIGTERM: a Ctrl-C after training started arrives here as
SIGTERM (exit 143). The signal carries no sign of where it came from (Python's handlers get no
siginfo), so such a SIGTERM is said as "SIGTERM (or Ctrl-C ...)" when MindSpore holds SIGINT.

SLURM's warning before a job's time limit (SIGUSR2, `signal_delay_s` ahead) only sets a flag
once `requeue_on` was called: the training loop checkpoints at its next step and raises
`Requeued` (engine.callbacks.RequeueAtSignal), which leaves the job's runs open for the
requeued job to continue. The workers of a parallel job never see the signal (their launcher
starts them with it blocked): the launcher passes it on as a file (`requeue_on_file`), which
every worker looks for at each step.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

PR_SET_PDEATHSIG = 1
HANDLED = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.hint = ""  # what the user can do next, filled in by whoever knows
        # MindSpore holds SIGINT (see the module doc): this SIGTERM may be the user's Ctrl-C
        self.maybe_ctrl_c = signum == signal.SIGTERM and sigint_held_by_another_handler()

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def said(self) -> str:
        """The signal as the user is told it."""
        if self.maybe_ctrl_c:
            return f"{self.name} (or Ctrl-C, which MindSpore turns into SIGTERM mid-step)"
        return self.name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class Requeued(BaseException):
    """The job stops for a requeue (SLURM's time-limit warning, or a preemption): not a
    failure and not an interruption, so the runs it passes through stay open (RUNNING) and the
    requeued job resumes them. `requeues` counts this one."""

    def __init__(self, signum: int, requeues: int):
        super().__init__(
            f"{signal.Signals(signum).name}: stopping for requeue {requeues} of this job"
        )
        self.signum = signum
        self.requeues = requeues


_received: list[int] = []  # every signal _raise saw, in order
_requeue_asked: list[int] = []  # signals that asked for a requeue, in order
_requeue: dict = {"armed": False, "before": 0, "file": None}  # requeues of this job before it


_deferring: list[int] = []  # per `deferred()` block: the signal it holds back (0: none yet)


def _raise(signum, frame):
    _received.append(signum)
    if _deferring and not _deferring[-1]:
        _deferring[-1] = signum  # the loop's next step end raises it (raise_if_received)
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Inside (MindSpore's training loop): the first SIGINT/SIGTERM is only recorded, and
    raised where the loop calls `raise_if_received` (every step's end) or when the block ends.
    Raised wherever the main thread happens to be, inside MindSpore's Python code between two
    of its C++ calls (its dataset iterator, a tensor's creation), it can leave MindSpore's
    state half-changed, and the process then aborts on a corrupted heap instead of ending
    KILLED (glibc's "corrupted size vs. prev_size", exit -6, seen once in a loaded CI run). A
    second signal raises at once: a loop that no longer reaches its step end still stops."""
    _deferring.append(0)
    try:
        yield
    finally:
        held = _deferring.pop()
    if held:
        raise Interrupted(held)


def raise_if_received() -> None:
    """Raise Interrupted again for a signal already received. Python runs a signal handler
    between any two bytecodes of the main thread; when that is inside a weakref callback or a
    `__del__` (MindSpore and MLflow run many), the exception is printed as "ignored" and lost.
    The training loop calls this at every step, so such an interrupt still ends the run."""
    if _received:
        raise Interrupted(_received[-1])


def requeue_on(sig: int, requeues_before: int) -> None:
    """From now on `sig` only asks for a requeue (a flag the training loop reads at its next
    step: an exception raised inside MindSpore's own code could be swallowed)."""
    _requeue.update(armed=True, before=requeues_before, file=None)
    _requeue_asked.clear()
    signal.signal(sig, lambda signum, frame: _requeue_asked.append(signum))


def requeue_on_file(asked: Path, requeues_before: int) -> None:
    """From now on the existence of file `asked` asks for a requeue, as SIGUSR2 would (a worker
    of a parallel job: its launcher makes the file when SLURM warns it)."""
    _requeue.update(armed=True, before=requeues_before, file=Path(asked))
    _requeue_asked.clear()


@contextlib.contextmanager
def kept_from_children(sig: int) -> Iterator[None]:
    """Processes started inside have `sig` blocked from their first instruction (a signal mask
    is inherited across exec; a handler is not): SLURM's time-limit warning goes to every
    process of a job step, and a helper process (the tracking writer) must not die of it. A
    `sig` this process receives meanwhile waits and is handled on the way out."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {sig})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def requeue_off(sig: int) -> None:
    """`sig` is ignored again (a job that cannot continue where it stopped, or may not be
    requeued once more, trains on until its time limit)."""
    signal.signal(sig, signal.SIG_IGN)
    _requeue.update(armed=False, file=None)
    _requeue_asked.clear()


def requeue_armed() -> bool:
    return bool(_requeue["armed"])


def requeue_asked() -> bool:
    asked = _requeue["file"]
    if asked is not None and not _requeue_asked and asked.exists():
        _requeue_asked.append(signal.SIGUSR2)  # what the launcher was sent
    return bool(_requeue_asked)


def requeues_before() -> int:
    return int(_requeue["before"])


def raise_requeued() -> None:
    """Stop for the requeue asked (of this process, or of another rank it agreed with)."""
    asked = _requeue_asked[-1] if _requeue_asked else signal.SIGUSR2
    raise Requeued(asked, int(_requeue["before"]) + 1)


_embedded: list[bool] = []  # inside `embedded()`: a caller's Python process, not a command's


@contextlib.contextmanager
def embedded() -> Iterator[None]:
    """A job run inside someone else's process (a notebook, a script: the Python API): no
    exit at once on start-up (`exit_at_once` would end their interpreter), handlers installed
    only in the main thread, and their SIGINT/SIGTERM handlers put back when it ends."""
    main = threading.current_thread() is threading.main_thread()
    before = {sig: signal.getsignal(sig) for sig in HANDLED} if main else {}
    _embedded.append(True)
    try:
        yield
    finally:
        _embedded.pop()
        for sig, handler in before.items():
            signal.signal(sig, handler)
        _received.clear()


def install() -> None:
    """From now on SIGINT/SIGTERM raise Interrupted in the main thread."""
    if _embedded and threading.current_thread() is not threading.main_thread():
        return  # Python takes signal handlers from the main thread only
    for sig in HANDLED:
        signal.signal(sig, _raise)
    _python_sigint[:] = [_c_handler(signal.SIGINT)]


_python_sigint: list[int | None] = []  # the C handler Python installed for SIGINT


class _Sigaction(ctypes.Structure):  # glibc's struct sigaction (Linux): the handler comes first
    _fields_ = [
        ("handler", ctypes.c_void_p),
        ("mask", ctypes.c_ulong * 16),
        ("flags", ctypes.c_int),
        ("restorer", ctypes.c_void_p),
    ]


def _c_handler(sig: int) -> int | None:
    """The address of the C function the kernel calls for `sig` now (None: unknown)."""
    action = _Sigaction()
    try:
        failed = ctypes.CDLL(None, use_errno=True).sigaction(sig, None, ctypes.byref(action))
    except (OSError, AttributeError):
        return None
    return None if failed else action.handler


def sigint_held_by_another_handler() -> bool:
    """Whether something replaced Python's SIGINT handler after install(): MindSpore's graph
    runtime does at each step, and turns a Ctrl-C into a SIGTERM of the process."""
    if not _python_sigint or _python_sigint[0] is None:
        return False
    return _c_handler(signal.SIGINT) not in (_python_sigint[0], None)


NOTHING_STARTED = "before any run started; nothing was left behind"


def exit_at_once(clean_up: Callable[[], None] = lambda: None) -> None:
    """Until `install()`: SIGINT/SIGTERM end the process at once, after `clean_up()`, with one
    line and 128 + the signal. For start-up, when no run exists yet: an exception raised
    inside a library that is loading (MindSpore turns it into an ImportError) would leave it
    half-initialised, and the interpreter's shutdown then crashes (exit 134). Nothing inside
    `embedded()`: the process is not the job's to end."""
    if _embedded:
        return

    def leave(signum, frame):
        try:
            clean_up()
        finally:
            os.write(
                2, f"Interrupted by {signal.Signals(signum).name} {NOTHING_STARTED}\n".encode()
            )
            os._exit(128 + signum)

    for sig in HANDLED:
        signal.signal(sig, leave)


def die_with_parent(sig: int = signal.SIGTERM, grace: float = 10.0) -> None:
    """This process ends when its parent does (Linux): the kernel sends `sig` at once (a worker
    blocked in a collective may not get to handle it), and a watchdog thread, `grace` seconds
    later, SIGKILLs what is left: the whole process group when the parent led it (msrun in the
    group the launcher made for it, with its log tailers), else this process alone."""
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)

    def end_group_if_orphaned():
        if os.getppid() == parent:
            return
        if os.getpgid(0) == parent:
            os.killpg(parent, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        time.sleep(grace)
        end_group_if_orphaned()

    atexit.register(
        end_group_if_orphaned
    )  # an orphan's clean exit (run marked KILLED) takes the group along
    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def parent_death_preexec(sig: int = signal.SIGTERM):
    """A Popen preexec_fn: the child gets `sig` when the process that started it dies."""

    def preexec():
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)

    return preexec
