"""A run's plan: what ``normbench run`` and ``normbench test`` read from the command line, parsed once, and
handed to their pytest sessions as values, never formatted back into options to be parsed again.

:class:`Plan` holds the parsed values (the backends' names, the seeds as integers, the threads, the required
properties, the throughput filters, where results go) and, once made, the backends themselves (a
``Selection``: created once, printed by the run's header, run by its sessions). A session gets the plan through
:class:`PlanPlugin`, a pytest plugin object that sets the pytest plugin's options to the plan's values before
anything reads them, and hands the same values to each pytest-xdist worker in its ``workerinput`` (plain data:
a worker is another process, where the backends are created again from their names). The pytest plugin applies
a worker's plan first thing (:func:`apply_to_worker`). Every room reads the values back through one frozen object,
``normbench.front.settings.of(config)``.

>>> plan = Plan(impl="numpy", seeds=[0, 1, 2])
>>> plan.options()["normbench_seed"], plan.options()["normbench_impl"]
([0, 1, 2], 'numpy')
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

import pytest

from normbench.core.registry import ALL, Selection

#: where a worker's plan travels in its ``workerinput``
WORKER_KEY = "normbench_plan"
#: the pytest stash key of a session's backends (made by the plugin, or handed over by a plan)
SELECTION = pytest.StashKey[Selection]()


@dataclass
class Plan:
    """What a run does, parsed; see the module doc. ``threads`` None: each library's own."""

    impl: str = ALL
    seeds: list[int] = field(default_factory=lambda: [0])
    threads: int | None = 1
    require: tuple[str, ...] = field(default_factory=lambda: _default_required())
    #: pytest-xdist's workers for the conformance suites ("auto", "0", "4"...)
    workers: str = "auto"
    suites: tuple[str, ...] = ("conformance", "throughput")
    out: str = "reports"
    run_id: str | None = None
    cache: str = "cold"
    direction: tuple[str, ...] | None = None
    dtype: tuple[str, ...] | None = None
    shape: tuple[str, ...] | None = None
    norm: tuple[str, ...] | None = None
    report: bool = True
    baseline: str = "torch"
    #: ``normbench run --rehearsal``: the GPU sweep shrunk, timed briefly (docs/gpu-node.md)
    rehearsal: bool = False
    #: the backends, once created (:meth:`select`); never sent to a worker
    selection: Selection | None = None
    #: how many conformance tests the suites collect, once counted (``normbench run``'s header): workers are capped by it
    tests: int | None = None
    #: ``normbench run --budget``: seconds the whole run may take (None: no limit), and the time (UNIX) after which
    #: no test starts, set when the run starts (the budget less the time kept for the summary and report)
    budget: float | None = None
    stop_at: float | None = None
    #: ``normbench run --bundle``: the folder the run is packed into at its end (None: not packed)
    bundle: str | None = None
    #: ``--untrusted``: every backend computes in a worker process of its own (normbench.core.remote)
    untrusted: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Plan:
        """The plan of a parsed ``normbench run`` or ``normbench test`` command line (values already parsed
        by ``normbench.front.options``' types)."""
        given = {name: getattr(args, name) for name in ("threads", "require", "workers", "suites", "out",
                                                        "run_id", "cache", "direction", "dtype", "shape", "norm",
                                                        "report", "baseline", "budget", "bundle", "rehearsal",
                                                        "untrusted")
                 if hasattr(args, name)}
        given["seeds"] = list(args.seed)
        return cls(impl=args.impl or ALL, **given)

    def select(self, progress=None) -> Selection:
        """Create the backends (once): ``progress(name, backend or reason)`` as each is made."""
        if self.selection is None:
            from normbench.core import remote
            from normbench.core.registry import get_registry

            self.selection = get_registry().select(self.impl, progress=progress,
                                                   create=remote.start if self.untrusted else None)
        return self.selection

    def options(self, **throughput: Any) -> dict[str, Any]:
        """The pytest plugin's option values (dest -> parsed value) this plan sets; ``throughput`` adds the
        throughput session's own (``run_id``: the run's folder name)."""
        values = {"normbench_impl": self.impl, "normbench_seed": list(self.seeds), "normbench_threads": self.threads,
                  "normbench_require": tuple(self.require), "normbench_stop_at": self.stop_at,
                  "normbench_untrusted": self.untrusted}
        if throughput:
            values.update({"normbench_out": self.out, "normbench_run_id": throughput.get("run_id", self.run_id),
                           "normbench_cache": self.cache, "normbench_direction": self.direction,
                           "normbench_dtype": self.dtype, "normbench_shape": self.shape, "normbench_norm": self.norm,
                           "normbench_rehearsal": self.rehearsal})
        return values


def _default_required() -> tuple[str, ...]:
    from normbench.check.properties import DEFAULT_REQUIRED

    return DEFAULT_REQUIRED


def apply(config: pytest.Config, options: dict[str, Any]) -> None:
    """Set ``config``'s option values (dest -> parsed value); the session's settings are read again from them
    (``normbench.front.settings``)."""
    from normbench.front import settings

    for dest, value in options.items():
        setattr(config.option, dest, value)
    settings.forget(config)


def apply_to_worker(config: pytest.Config) -> None:
    """In a pytest-xdist worker, the plan its controller sent (nothing elsewhere)."""
    options = getattr(config, "workerinput", {}).get(WORKER_KEY)
    if options:
        apply(config, options)


@dataclass
class PlanPlugin:
    """Hands a :class:`Plan` to a pytest session (``pytest.main(args, plugins=[PlanPlugin(...)])``): its option
    values, its backends (created once, beforehand), and the same values to every worker."""

    plan: Plan
    options: dict[str, Any]

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        apply(config, self.options)
        if self.plan.selection is not None:
            config.stash[SELECTION] = self.plan.selection

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        node.workerinput[WORKER_KEY] = self.options  # plain data (str, int, None, list, tuple): execnet sends it as it is
