"""The meaningful range of a numeric option, written where the option is declared:
`lr: Annotated[float, Positive] = 0.01` on a component's argument, or on a config dataclass
field. Config validation reads these annotations and reports every value outside its range
at once (exit 2, one line per key), before any work starts. A string option's allowed values
are its annotation too: `Literal["max", "min"]`, or `Annotated[str, ValidationMetric]` for a
hook's argument that names a metric the stage records on the validation split.

Every range is of finite numbers (inf and nan are refused, as MindSpore refuses them wherever
it takes a number: a rate of inf was a traceback after the run started), and a number with no
range at all is checked against `ANY_NUMBER`, which holds only that; a range that means to
take infinity says so (`Range(low=0, finite=False)`)."""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class Range:
    """low < or <= value < or <= high; a None bound is open-ended; `finite`: inf and -inf
    are outside (nan always is)."""

    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    high_open: bool = False
    finite: bool = True

    def problem(self, value: Any) -> Optional[str]:
        """Why `value` is outside the range (None when it is inside, or is not a number)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        if math.isnan(value) or (self.finite and math.isinf(value)):
            bounds = "" if self.low is None and self.high is None else f" {self}"
            return f"must be a finite number{bounds}"
        below = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        above = self.high is not None and (
            value >= self.high if self.high_open else value > self.high
        )
        return f"must be {self}" if below or above else None

    def __str__(self) -> str:
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"in {left}{_number(self.low)}, {_number(self.high)}{right}"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {_number(self.low)}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {_number(self.high)}"
        return "any number"


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def AtLeast(low: float) -> Range:
    return Range(low=low)


def Between(low: float, high: float, low_open: bool = False, high_open: bool = False) -> Range:
    return Range(low, high, low_open, high_open)


ANY_NUMBER = Range()  # what a number without a range of its own must be: finite
Positive = Range(low=0, low_open=True)
NonNegative = Range(low=0)
Count = AtLeast(1)  # a whole number of things: epochs, workers, batches
OpenUnit = Between(0, 1, True, True)  # 0 < x < 1: step factors, Armijo constants
Decay = Between(0, 1, high_open=True)  # 0 <= x < 1: momenta, betas, smoothing
Seed = Between(0, 2**32 - 1)  # what every RNG a run seeds takes: numpy's, MindSpore's data sets'


@dataclass(frozen=True)
class RecordedMetric:
    """Marks a hook's argument that names a validation metric (`val/acc`, ...): checked against
    the metrics the job's stages record at each evaluation (config.objective
    .validation_metrics), so a name no stage records - a typo, a `test/` metric - is refused
    before work instead of watched in vain."""


ValidationMetric = RecordedMetric()


def names_metric(hint: Any) -> bool:
    """Whether an `Annotated[...]` hint (also inside Optional[...]) carries ValidationMetric."""
    if typing.get_origin(hint) is typing.Annotated:
        return any(isinstance(m, RecordedMetric) for m in hint.__metadata__)
    if typing.get_origin(hint) is typing.Union:
        return any(names_metric(a) for a in typing.get_args(hint))
    return False


def range_of(hint: Any) -> Optional[Range]:
    """The Range in an `Annotated[...]` hint, also inside Optional[...]; None if there is none
    (see `rule_of`)."""
    if typing.get_origin(hint) is typing.Annotated:
        return next((m for m in hint.__metadata__ if isinstance(m, Range)), None)
    if typing.get_origin(hint) is typing.Union:
        return next((r for r in map(range_of, typing.get_args(hint)) if r is not None), None)
    return None


def rule_of(hint: Any) -> Range:
    """The range a value for `hint` is checked against: its own, else ANY_NUMBER (finite)."""
    return range_of(hint) or ANY_NUMBER


def without_range(hint: Any) -> Any:
    """The plain type under an `Annotated[...]` hint (unchanged when there is none)."""
    if typing.get_origin(hint) is typing.Annotated:
        return typing.get_args(hint)[0]
    if typing.get_origin(hint) is typing.Union:
        return typing.Union[tuple(without_range(a) for a in typing.get_args(hint))]
    return hint
