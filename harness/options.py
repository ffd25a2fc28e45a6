"""Option values and the options shared by the CLI and the pytest plugin.

Every ``type=`` value parser of ``normbench``'s command line and of its pytest
plugin lives here. Each takes the string the user typed and returns the value,
or raises :class:`argparse.ArgumentTypeError` saying
``Could not parse value: '<value>'. <how to fix it>``; argparse (and pytest,
which uses it) turns that into a usage error.

The options both front ends have are defined once, by the ``add_*_options``
functions, the way pytest-benchmark shares its options: each takes an
``addoption`` callable, either an :mod:`argparse` parser's ``add_argument`` or a
pytest option group's ``addoption``, and a ``prefix`` for the option names:
``"normbench-"`` in the pytest plugin (``--normbench-seed``), ``""`` in the CLI
(``normbench run --seed``).

>>> parse_seeds("0..3")
[0, 1, 2, 3]
>>> parse_directions("sideways")  # doctest: +ELLIPSIS
Traceback (most recent call last):
argparse.ArgumentTypeError: ... Unknown direction 'sideways'; valid directions: forward, backward, forward+backward
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from normbench.dtypes import DTYPES
from normbench.perf.roofline import DIRECTIONS
from normbench.perf.sweep import sweep_shapes
from normbench.perf.timing import CACHES
from normbench.registry import ALL

#: the suites ``normbench run --suites`` chooses from
SUITES: tuple[str, ...] = ("conformance", "throughput")
_SEED_RANGE = re.compile(r"^(\d+)\.\.(\d+)$")


def _error(value: str, fix: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"Could not parse value: {value!r}. {fix}")


# -- value parsers ---------------------------------------------------------------------------------------------------

def parse_seeds(value: str) -> list[int]:
    """``"3"``, ``"0..19"`` (inclusive) or ``"1,4,9"`` as a list of seeds (repeats dropped)."""
    try:
        match = _SEED_RANGE.match(value.strip())
        if match:
            lo, hi = int(match[1]), int(match[2])
            if lo > hi:
                raise ValueError
            return list(range(lo, hi + 1))
        seeds = [int(s) for s in value.split(",")]
        if not seeds or min(seeds) < 0:
            raise ValueError
        return list(dict.fromkeys(seeds))
    except ValueError:
        raise _error(value, "Use a seed N >= 0, a range A..B or a list N,M,...") from None


def format_seeds(seeds: Sequence[int]) -> str:
    """The inverse of :func:`parse_seeds`: ``[0, 1, 2]`` -> ``"0..2"``, ``[1, 4]`` -> ``"1,4"``."""
    if len(seeds) > 2 and list(seeds) == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}..{seeds[-1]}"
    return ",".join(str(s) for s in seeds)


def parse_deviations_file(value: str) -> Path:
    """The path of an existing known-deviations file (``--normbench-deviations``)."""
    path = Path(value)
    if not path.is_file():
        raise _error(value, "Give an existing known-deviations file.")
    return path


def parse_array_shape(value: str) -> tuple[int, ...]:
    """An array's shape, sizes joined by ``x`` (or commas): ``"64x1000"`` -> ``(64, 1000)``."""
    try:
        dims = tuple(int(d) for d in value.lower().replace(",", "x").split("x") if d != "")
        if not dims or min(dims) < 0:
            raise ValueError
        return dims
    except ValueError:
        raise _error(value, "Use sizes joined by 'x', e.g. 64x1000") from None


def parse_eps(value: str) -> float:
    """A number (range checks are the case's: :func:`normbench.cases.validate_eps`)."""
    try:
        return float(value)
    except ValueError:
        raise _error(value, "Use a number, e.g. 1e-5") from None


def parse_count(minimum: int) -> Callable[[str], int]:
    """A parser of integers >= ``minimum``."""
    def parse(value: str) -> int:
        try:
            number = int(value)
            if number < minimum:
                raise ValueError
            return number
        except ValueError:
            raise _error(value, f"Use an integer >= {minimum}") from None
    return parse


def parse_seconds(value: str) -> float:
    """A finite number of seconds >= 0."""
    try:
        number = float(value)
        if not (math.isfinite(number) and number >= 0):
            raise ValueError
        return number
    except ValueError:
        raise _error(value, "Use seconds >= 0, e.g. 1.0") from None


def _parse_choices(kind: str, plural: str, value: str, valid: Sequence[str]) -> tuple[str, ...]:
    """One or more of ``valid``, separated by commas (case-insensitive, repeats dropped)."""
    chosen = tuple(dict.fromkeys(v.strip().lower() for v in value.split(",") if v.strip()))
    if not chosen:
        raise _error(value, f"Give one or more {plural} separated by commas; valid {plural}: {', '.join(valid)}")
    for v in chosen:
        if v not in valid:
            raise _error(value, f"Unknown {kind} {v!r}; valid {plural}: {', '.join(valid)}")
    return chosen


def parse_suites(value: str) -> tuple[str, ...]:
    """Suites of :data:`SUITES`, separated by commas."""
    chosen = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    if not chosen or any(v not in SUITES for v in chosen):
        raise _error(value, f"Valid suites: {', '.join(SUITES)}")
    return chosen


def parse_directions(value: str) -> tuple[str, ...]:
    """Throughput directions (:data:`normbench.perf.roofline.DIRECTIONS`), separated by commas."""
    return _parse_choices("direction", "directions", value, DIRECTIONS)


def parse_dtypes(value: str) -> tuple[str, ...]:
    """dtype names (:data:`normbench.dtypes.DTYPES`), separated by commas."""
    return _parse_choices("dtype", "dtypes", value, DTYPES)


def parse_shapes(value: str) -> tuple[str, ...]:
    """Shapes of the throughput sweep as ``ROWSxHIDDEN`` (:func:`normbench.perf.sweep.sweep_shapes`), separated by commas."""
    return _parse_choices("shape", "shapes", value, sweep_shapes())


# -- the options shared by the CLI and the pytest plugin -------------------------------------------------------------

#: where both spellings of the backend option note the value they were given (see :class:`ImplAction`)
_IMPL_GIVEN = "_normbench_impl_given"


class ImplAction(argparse.Action):
    """Stores a backend selection; the spellings sharing its ``dest`` (``--normbench-impl`` and the
    ``--impl`` of ``suites/conftest.py``) are one setting, and giving them different values is a
    usage error."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        given = {**getattr(namespace, _IMPL_GIVEN, {}), option_string: values}
        if len(set(given.values())) > 1:
            both = " and ".join(f"{name}={value}" for name, value in given.items())
            raise argparse.ArgumentError(self, f"{both} are the same setting given two values; give one of them")
        setattr(namespace, _IMPL_GIVEN, given)
        setattr(namespace, self.dest, values)


def impl_given_as(namespace: argparse.Namespace, default: str = "--normbench-impl") -> str:
    """The option the backends were given as (``--impl`` or ``--normbench-impl``), for messages."""
    return next(iter(getattr(namespace, _IMPL_GIVEN, {})), default)


def add_impl_option(addoption: Callable, prefix: str, note: str = "", **attrs) -> None:
    """``--<prefix>impl``: the backends to run on (``None`` when not given, which means 'all').
    ``note`` goes into the help before the default; ``attrs`` (e.g. ``dest``) go to ``addoption``."""
    addoption(f"--{prefix}impl", metavar="NAMES", default=None, action=ImplAction,
              help="Backends to run the suites on: a name, names separated by commas, or "
                   f"{ALL!r} (every available backend; unavailable ones are listed and skipped). "
                   f"`normbench list` shows the names.{note} Default: {ALL!r}", **attrs)


def add_seed_option(addoption: Callable, prefix: str) -> None:
    """``--<prefix>seed``: the seeds of the random inputs, as a list of ints."""
    addoption(f"--{prefix}seed", metavar="SEEDS", type=parse_seeds, default="0",
              help="Seed(s) of the random inputs: N, a range A..B, or N,M,... Several seeds add a -seedN "
                   "suffix to test ids; throughput uses the first. Default: %(default)r")


def add_throughput_options(addoption: Callable, prefix: str) -> None:
    """Where results go and which part of the throughput sweep runs, and how:
    ``--<prefix>out``, ``run-id``, ``cache``, ``direction``, ``dtype`` and ``shape``."""
    addoption(f"--{prefix}out", metavar="DIR", default="reports",
              help="Results go to DIR/<run-id>/ (CSV, JSON, environment.json). Default: %(default)r")
    addoption(f"--{prefix}run-id", metavar="ID", default=None,
              help="The run id (the results folder's name). Default: UTC time and host name")
    addoption(f"--{prefix}cache", choices=CACHES, default="cold",
              help="cold: flush the last-level cache before every timed sample; warm: do not. Default: %(default)r")
    addoption(f"--{prefix}direction", metavar="LIST", type=parse_directions, default=None,
              help=f"Throughput directions to run, separated by commas: {', '.join(DIRECTIONS)}. Default: all")
    addoption(f"--{prefix}dtype", metavar="LIST", type=parse_dtypes, default=None,
              help="Throughput dtypes to run, separated by commas. Default: all of the sweep's")
    addoption(f"--{prefix}shape", metavar="LIST", type=parse_shapes, default=None,
              help="Throughput shapes to run, ROWSxHIDDEN separated by commas. Default: all of the sweep's")
