"""A network that raises while being built on one rank: a real worker failure for launch tests."""

from mindspore.communication import get_rank

from sporeflow.models.lenet import LeNet5


class FailOnRank(LeNet5):
    def __init__(self, num_classes: int = 10, num_channel: int = 1, fail_rank: int = 1):
        if get_rank() == fail_rank:
            raise RuntimeError(f"deliberate failure while building the network on rank {fail_rank}")
        super().__init__(num_classes, num_channel)


class BrokenInit(LeNet5):
    """A bug in a user's model code (not a config typo): it must keep its traceback, exit 1."""

    def __init__(self, num_classes: int = 10, num_channel: int = 1):
        raise ValueError("bug in the user's model code: shapes do not line up")


class FailOnEveryRank(LeNet5):
    """Every worker of a parallel job fails while building its network."""

    def __init__(self, num_classes: int = 10, num_channel: int = 1):
        raise RuntimeError(f"deliberate failure on rank {get_rank()}")
