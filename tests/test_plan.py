"""A run's plan is parsed once and travels as values (issue 26): ``normbench run``/``test`` parse the command line
into a Plan, hand it to each pytest session through a plugin object, and to each xdist worker in its
``workerinput``; the seeds are never formatted back into text and parsed again, and no pytest argument carries
the backends or the seeds."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from types import SimpleNamespace

import pytest

from normbench.front import run
from normbench.front.cli import parser
from normbench.front.plan import SELECTION, WORKER_KEY, Plan, PlanPlugin, apply_to_worker
from normbench.suites import DIRECTORY as SUITES


def plan_of(*argv: str) -> Plan:
    args, _ = parser().parse_known_args(["run", *argv])
    return Plan.from_args(args)


def test_the_command_line_is_parsed_once_into_values():
    plan = plan_of("--impl=numpy", "--seed=1,4,9", "--threads=library", "--require=none", "--dtype=bfloat16")
    assert (plan.impl, plan.seeds, plan.threads, plan.require, plan.dtype) == ("numpy", [1, 4, 9], None, (),
                                                                              ("bfloat16",))
    assert plan_of().impl == "all" and plan_of().require == ("deterministic",)


def test_no_pytest_argument_carries_the_backends_or_the_seeds():
    plan = plan_of("--impl=numpy", "--seed=3", "-n", "2")
    args = run.conformance_args(plan, ["-k", "x"]) + run.throughput_args()
    assert not any(a.startswith(("--normbench-impl", "--normbench-seed", "--impl")) for a in args), args
    assert args[:1] == [str(SUITES)] and "-n" in args


def test_the_plugin_sets_the_options_and_hands_them_to_each_worker():
    plan = plan_of("--impl=numpy", "--seed=4,5", "--require=batch-invariant")
    plugin = PlanPlugin(plan, plan.options(run_id="r1"))
    config = SimpleNamespace(option=SimpleNamespace(), stash={})
    plugin.pytest_configure(config)
    assert config.option.normbench_seed == [4, 5] and config.option.normbench_impl == "numpy"
    assert config.option.normbench_require == ("deterministic", "batch-invariant")
    assert config.option.normbench_run_id == "r1" and SELECTION not in config.stash  # no backends made yet
    node = SimpleNamespace(workerinput={})
    plugin.pytest_configure_node(node)
    worker = SimpleNamespace(option=SimpleNamespace(), workerinput=node.workerinput)
    apply_to_worker(worker)
    assert node.workerinput[WORKER_KEY]["normbench_seed"] == [4, 5]  # plain data: what execnet sends
    assert worker.option.normbench_seed == [4, 5] and worker.option.normbench_require == ("deterministic",
                                                                                         "batch-invariant")


@pytest.mark.e2e
def test_normbench_test_runs_the_plans_seeds_in_the_workers(tmp_path):
    out = subprocess.run([sys.executable, "-m", "normbench", "test", "--impl=numpy", "--seed=3,8", "-n", "2",
                          "-k", "test_forward and not rms and not add- and float32-rows8-hidden1000-offset1e3", "-v"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "2 passed" in out.stdout, out.stdout[-3000:]
    assert "-seed3] " in out.stdout and "-seed8] " in out.stdout, out.stdout[-3000:]  # run by the workers


def test_a_plan_applied_after_the_settings_were_read_is_what_they_say_next():
    """The settings (normbench.front.settings) are read once per session, and read again after a plan sets the
    options: a worker applying its controller's plan never keeps the values it parsed from its own command line."""
    from normbench.front import settings
    from normbench.front.settings import PREFIX, Settings

    option = SimpleNamespace(**{PREFIX + f.name: None for f in dataclasses.fields(Settings)})
    option.normbench_seed = [0]
    config = SimpleNamespace(option=option, stash={})
    assert settings.of(config).seed == (0,)
    option.normbench_seed = [9]
    assert settings.of(config).seed == (0,)  # read once: one object per session
    plan = plan_of("--impl=numpy", "--seed=4,5")
    PlanPlugin(plan, plan.options()).pytest_configure(config)
    assert settings.of(config).seed == (4, 5) and settings.of(config).impl == "numpy"
