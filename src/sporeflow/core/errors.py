"""Errors a user can fix. The entry turns them into one clear message and a non-zero exit."""


class SporeflowError(Exception):
    """Base class: a problem with the user's input, not a bug in sporeflow."""


class ConfigError(SporeflowError):
    """The composed config is invalid; the message names the full key path and allowed values.

    Exits with code 2 (usage error), like argparse.
    """


class DataError(SporeflowError):
    """A data set is missing, has the wrong layout or is empty; the message says what was expected."""


class DivergedError(SporeflowError):
    """Training produced a non-finite loss or weights; the message names the stage, step and
    value, and the last finite checkpoint."""
