"""``--impl``: the short spelling of the pytest plugin's ``--normbench-impl``, for the suites.

The plugin (:mod:`normbench.front.pytest_plugin`) is loaded by every pytest session
where normbench is installed, so it registers only ``--normbench-*`` options
(a project's own ``--impl`` must keep working). This conftest adds ``--impl``
where the suites are collected: ``pytest suites/ --impl=torch`` from a checkout,
``pytest <site-packages>/normbench/suites --impl=torch`` from an installation.
pytest reads it when the suites folder (or a file in it) is on the command line.

Both spellings store into the same setting (``config.getoption("normbench_impl")``);
giving both with different values is a usage error. Where another conftest or
plugin of the session already defines ``--impl`` (a project's own, with the
suites collected beside its tests), that one stays, and ``--normbench-impl``
selects the backends.
"""

import pytest

from normbench.front import options


def pytest_addoption(parser: pytest.Parser) -> None:
    if _defined(parser, "--impl"):
        return
    options.add_impl_option(parser.getgroup("normbench").addoption, prefix="", dest="normbench_impl",
                            note=" The short form of --normbench-impl, on normbench's suites folder.")


def _defined(parser: pytest.Parser, name: str) -> bool:
    """Whether an option ``name`` is already registered (pytest has no public question for it)."""
    groups = [getattr(parser, "_anonymous", None), *getattr(parser, "_groups", ())]
    return any(name in option.names() for group in groups if group is not None for option in group.options)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each case's ``test_backward_identities`` right after its ``test_backward``: the identities
    then judge the backward run the value checks just made (``conformance.recent_backward``)
    instead of running it again. Everything else keeps its order; under pytest-xdist a pair
    is sent to one worker together unless it falls on the edge of a batch (then it runs twice)."""
    anchor = {item.name.removeprefix("test_backward"): i for i, item in enumerate(items)
              if getattr(item, "originalname", None) == "test_backward"}

    def key(i: int) -> tuple[int, int]:
        item = items[i]
        if getattr(item, "originalname", None) == "test_backward_identities":
            return anchor.get(item.name.removeprefix("test_backward_identities"), i), 1
        return i, 0

    items[:] = [items[i] for i in sorted(range(len(items)), key=key)]
