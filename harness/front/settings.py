"""A pytest session's normbench settings: every ``--normbench-*`` value, read once into one frozen object.

The values come from the command line (``pytest suites/ --impl=... --normbench-seed=...``) or from a run's plan
(``normbench.front.plan``: ``normbench run`` and ``normbench test`` set them before anything reads them, and send
them to each pytest-xdist worker as one value of its ``workerinput``). Every room of the front reads them through
:func:`of`, never ``config.getoption("normbench_...")``: one accessor, one object per session (in
``config.stash``), rebuilt only when a plan sets the values (:func:`forget`).

>>> import argparse
>>> given = {PREFIX + f.name: None for f in fields(Settings)} | {"normbench_seed": [0, 1], "normbench_threads": 1}
>>> Settings.of_options(argparse.Namespace(**given)).seed
(0, 1)
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import pytest

#: the option names' common prefix: field ``seed`` is option ``--normbench-seed``, dest ``normbench_seed``
PREFIX = "normbench_"


@dataclass(frozen=True)
class Settings:
    """The values of a session's ``--normbench-*`` options (the field is the option's name, its default the
    option's: ``normbench.front.options``, the plugins' ``pytest_addoption``)."""

    #: the backends' spec (names, or ``all``); None: not given (the suites then run no backend of their own)
    impl: str | None
    seed: tuple[int, ...]
    threads: int | None
    require: tuple[str, ...]
    deviations: tuple[str, ...]
    untrusted: bool
    strict: bool
    #: the isolation's: each test's time limit, failures per backend before the rest are skipped, the budget's end
    timeout: float | None
    maxfail: int
    stop_at: float | None
    #: the throughput suite's
    out: str
    run_id: str | None
    cache: str
    direction: tuple[str, ...] | None
    dtype: tuple[str, ...] | None
    shape: tuple[str, ...] | None
    norm: tuple[str, ...] | None
    rehearsal: bool
    min_samples: int
    max_time: float
    ceiling_mib: int | None

    @classmethod
    def of_options(cls, option: Any) -> Settings:
        """The settings in a parsed option namespace (``config.option``)."""
        values = {f.name: getattr(option, PREFIX + f.name) for f in fields(cls)}
        return cls(**{name: tuple(value) if isinstance(value, list) else value for name, value in values.items()})


_KEY = pytest.StashKey[Settings]()


def of(config: pytest.Config) -> Settings:
    """The session's settings (read from its options on first use)."""
    if _KEY not in config.stash:
        config.stash[_KEY] = Settings.of_options(config.option)
    return config.stash[_KEY]


def forget(config: pytest.Config) -> None:
    """Drop the settings read so far: a plan has just set the options (``normbench.front.plan.apply``)."""
    stash = getattr(config, "stash", None)  # None: a stand-in config without one has read nothing
    if stash is not None and _KEY in stash:
        del stash[_KEY]
