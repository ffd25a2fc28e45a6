"""normbench.core.registry with fake plugins, installed the pandas way: a
``<name>-0.0.0.dist-info`` folder (METADATA, entry_points.txt) and the plugin's
module under a temporary folder prepended to sys.path (the ``installed_plugins``
fixture of tests/conftest.py). Nothing is pip-installed.

Every broken plugin must become a message that names its distribution and the
fix, and must never stop the built-in ``numpy`` backend from loading.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import itertools
import sys
import textwrap

import numpy as np
import pytest

import normbench
from normbench import Availability, BackendUnavailable, PluginError, UnknownBackend
from normbench.check import oracle
from normbench.core.registry import GROUP, Registry
from tests.plugins import PluginFolder

_counter = itertools.count()

# A minimal working backend; {cls} and {name} are filled in per plugin.
GOOD_BACKEND = '''
import numpy as np
from normbench import Backend


class {cls}(Backend):
    name = {name!r}
    dtypes = ("float64",)
    has_backward = False

    def asarray(self, host):
        return np.array(host)

    def to_numpy(self, native):
        return np.asarray(native)

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
        mu = x.mean(axis=axes, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
        y = (x - mu) / np.sqrt(var + eps)
        if weight is not None:
            y = y * weight
        if bias is not None:
            y = y + bias
        return y.astype(x.dtype)
'''


class FakePlugins:
    """Fake distributions and modules, uniquely named, in an installed :class:`PluginFolder`."""

    def __init__(self, folder: PluginFolder) -> None:
        self.folder = folder
        self.tag = f"nbfake{next(_counter)}_{id(self) % 10_000}"

    def module(self, source: str) -> str:
        """A new uniquely named module with ``source``; returns its name."""
        return self.folder.module(f"{self.tag}_mod{len(self.folder.modules)}", source)

    def backend_module(self, cls: str, name: str, extra: str = "") -> str:
        """A module holding a working backend class ``cls`` named ``name``, plus ``extra`` methods."""
        return self.module(GOOD_BACKEND.format(cls=cls, name=name) + textwrap.indent(textwrap.dedent(extra), "    "))

    def distribution(self, dist: str, entry_points: dict[str, str]) -> str:
        """A fake installed distribution ``dist`` registering ``entry_points`` (name -> target)."""
        return self.folder.distribution(entry_points, dist=dist, group=GROUP)

    def dist_name(self, what: str) -> str:
        return f"{self.tag}_{what}"

    def registry(self) -> Registry:
        """A Registry over every installed entry point, normbench's own ``torch``
        left out so that ``select("all")`` stays light (it would import torch)."""
        eps = importlib.metadata.entry_points(group=GROUP)
        return Registry([ep for ep in eps if not (ep.name == "torch" and ep.dist.metadata["Name"] == "normbench")])


@pytest.fixture
def fake(installed_plugins):
    """Fake plugins on sys.path for this test; afterwards the global registry has forgotten them
    and numpy still works (tests/conftest.py checks)."""
    return FakePlugins(installed_plugins)


def assert_numpy_still_works(registry: Registry) -> None:
    assert "numpy" in registry.names
    assert registry.plugin("numpy").distribution == "normbench"
    assert registry.load_class("numpy").name == "numpy"
    backend = registry.create("numpy")
    assert backend.name == "numpy"
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(backend.to_numpy(backend.layer_norm(x, (3,), None, None, 1e-5)),
                               oracle.forward(x, (3,), None, None, 1e-5).y, rtol=1e-12, atol=1e-12)


def assert_names_distribution_and_fix(message: str, dist: str) -> None:
    assert dist in message, message
    assert "Fix:" in message, message


# -- a working plugin -------------------------------------------------------------


def test_working_plugin_is_listed_loadable_and_creatable(fake):
    name = f"{fake.tag}-good"
    dist = fake.distribution(fake.dist_name("good"), {name: f"{fake.backend_module('Good', name)}:Good"})
    registry = fake.registry()
    assert name in registry.names
    assert not registry.problems
    plugin = registry.plugin(name)
    assert (plugin.distribution, plugin.version, plugin.provider) == (dist, "0.0.0", f"{dist} 0.0.0")
    cls = registry.load_class(name)
    assert issubclass(cls, normbench.Backend) and cls.name == name
    assert registry.availability(name)
    backend = registry.create(name)
    x = np.random.default_rng(0).standard_normal((3, 5))
    np.testing.assert_allclose(backend.layer_norm(x, (5,), None, None, 1e-5),
                               oracle.forward(x, (5,), None, None, 1e-5).y, rtol=1e-12, atol=1e-12)
    selection = registry.select(f"numpy,{name}")
    assert [b.name for b in selection.backends] == ["numpy", name]
    assert {b.name for b in registry.select("all").backends} >= {"numpy", name}
    assert_numpy_still_works(registry)


def test_refresh_sees_a_new_plugin(fake):
    name = f"{fake.tag}-late"
    before = normbench.get_registry()
    assert name not in before.names
    fake.distribution(fake.dist_name("late"), {name: f"{fake.backend_module('Late', name)}:Late"})
    assert normbench.get_registry() is before  # cached until refresh()
    assert name in normbench.refresh().names
    assert "numpy" in normbench.get_registry().names


# -- broken plugins ---------------------------------------------------------------


def test_import_error_names_distribution(fake):
    name = f"{fake.tag}-broken"
    module = fake.module("import not_a_real_module_for_normbench_tests\n")
    dist = fake.distribution(fake.dist_name("broken"), {name: f"{module}:Broken"})
    registry = fake.registry()
    assert name in registry.names  # listing reads metadata only
    with pytest.raises(PluginError, match="failed to import") as info:
        registry.load_class(name)
    message = str(info.value)
    assert_names_distribution_and_fix(message, dist)
    assert "ModuleNotFoundError" in message and "not_a_real_module_for_normbench_tests" in message
    with pytest.raises(PluginError, match="failed to import"):
        registry.create(name)
    selection = registry.select("all")
    assert "numpy" in [b.name for b in selection.backends]
    assert any(n == name and "failed to import" in why for n, why in selection.skipped)
    assert_numpy_still_works(registry)


def test_missing_attribute_is_an_import_failure(fake):
    name = f"{fake.tag}-noattr"
    module = fake.module("X = 1\n")
    dist = fake.distribution(fake.dist_name("noattr"), {name: f"{module}:Missing"})
    registry = fake.registry()
    with pytest.raises(PluginError, match="failed to import") as info:
        registry.load_class(name)
    assert_names_distribution_and_fix(str(info.value), dist)
    assert_numpy_still_works(registry)


@pytest.mark.parametrize("target", ["NOT_A_CLASS", "NotABackend", "make"])
def test_not_a_backend_subclass(fake, target):
    name = f"{fake.tag}-notbackend"
    module = fake.module('''
        NOT_A_CLASS = 42

        class NotABackend:
            name = "x"

        def make():
            return None
    ''')
    dist = fake.distribution(fake.dist_name("notbackend"), {name: f"{module}:{target}"})
    registry = fake.registry()
    with pytest.raises(PluginError, match="not a normbench.Backend subclass") as info:
        registry.load_class(name)
    assert_names_distribution_and_fix(str(info.value), dist)
    assert_numpy_still_works(registry)


def test_class_name_differs_from_entry_point(fake):
    name = f"{fake.tag}-declared"
    module = fake.backend_module("Misnamed", "something-else")
    dist = fake.distribution(fake.dist_name("misnamed"), {name: f"{module}:Misnamed"})
    registry = fake.registry()
    with pytest.raises(PluginError) as info:
        registry.load_class(name)
    message = str(info.value)
    assert_names_distribution_and_fix(message, dist)
    assert "'something-else'" in message and repr(name) in message
    assert_numpy_still_works(registry)


@pytest.mark.parametrize("bad", ["Bad Name", "all", "1st", "bad.name", "trailing-"])
def test_invalid_entry_point_name_is_a_problem(fake, bad):
    good = f"{fake.tag}-ok"
    module = fake.backend_module("Ok", good)
    dist = fake.distribution(fake.dist_name("badname"), {bad: f"{module}:Ok", good: f"{module}:Ok"})
    registry = fake.registry()
    assert bad not in registry.names and bad not in registry.plugins
    assert good in registry.names  # the distribution's valid names still work
    problems = [p for p in registry.problems if p.name == bad]
    assert len(problems) == 1, registry.problems
    assert problems[0].distribution == dist
    assert "not valid" in problems[0].message
    assert_names_distribution_and_fix(problems[0].message, dist)
    skipped = registry.select("all").skipped
    assert (bad, problems[0].message) in skipped
    assert_numpy_still_works(registry)


def test_two_distributions_claim_one_name(fake):
    name = f"{fake.tag}-dup"
    first = fake.distribution(fake.dist_name("a_dup"), {name: f"{fake.backend_module('DupA', name)}:DupA"})
    second = fake.distribution(fake.dist_name("b_dup"), {name: f"{fake.backend_module('DupB', name)}:DupB"})
    registry = fake.registry()
    assert name in registry.names
    assert registry.plugin(name).distribution == first  # the first by distribution name
    problems = [p for p in registry.problems if p.name == name]
    assert len(problems) == 1, registry.problems
    assert first in problems[0].message and second in problems[0].message
    assert "Fix:" in problems[0].message
    assert registry.create(name).name == name
    assert_numpy_still_works(registry)


def test_builtin_wins_a_name_clash(fake):
    module = fake.backend_module("Impostor", "numpy")
    dist = fake.distribution(fake.dist_name("impostor"), {"numpy": f"{module}:Impostor"})
    registry = fake.registry()
    assert registry.plugin("numpy").distribution == "normbench"
    assert registry.plugin("numpy").target == "normbench.impls.numpy_ref:NumpyBackend"
    problems = [p for p in registry.problems if p.name == "numpy"]
    assert len(problems) == 1, registry.problems
    assert problems[0].distribution == dist
    assert "normbench" in problems[0].message and dist in problems[0].message
    assert "Fix:" in problems[0].message
    assert type(registry.create("numpy")).__module__ == "normbench.impls.numpy_ref"
    assert module not in sys.modules  # the impostor was never imported
    selection = registry.select("all")  # the clash is a warning; numpy itself still runs
    assert "numpy" in [b.name for b in selection.backends]
    assert "numpy" not in [n for n, _ in selection.skipped]
    assert any(dist in w for w in selection.warnings)
    assert_numpy_still_works(registry)


def test_availability_that_raises(fake):
    name = f"{fake.tag}-avail"
    module = fake.backend_module("Raises", name, extra='''
        @classmethod
        def availability(cls):
            raise RuntimeError("probe crashed")
    ''')
    dist = fake.distribution(fake.dist_name("avail"), {name: f"{module}:Raises"})
    registry = fake.registry()
    assert registry.load_class(name).name == name
    with pytest.raises(PluginError, match=r"availability\(\) raised") as info:
        registry.availability(name)
    message = str(info.value)
    assert_names_distribution_and_fix(message, dist)
    assert "RuntimeError: probe crashed" in message
    with pytest.raises(PluginError, match=r"availability\(\) raised"):
        registry.create(name)
    selection = registry.select("all")
    assert "numpy" in [b.name for b in selection.backends]
    assert any(n == name and "availability() raised" in why for n, why in selection.skipped)
    assert_numpy_still_works(registry)


def test_unavailable_backend(fake):
    name = f"{fake.tag}-gpu"
    module = fake.backend_module("NeedsGpu", name, extra='''
        @classmethod
        def availability(cls):
            from normbench import Availability
            return Availability.no("needs a GPU")

        def __init__(self):
            raise AssertionError("must not be instantiated when unavailable")
    ''')
    fake.distribution(fake.dist_name("gpu"), {name: f"{module}:NeedsGpu"})
    registry = fake.registry()
    assert registry.availability(name) == Availability.no("needs a GPU")
    with pytest.raises(BackendUnavailable, match="needs a GPU") as info:
        registry.create(name)
    assert repr(name) in str(info.value)
    with pytest.raises(BackendUnavailable, match="needs a GPU"):
        registry.select(name)  # named explicitly: raises
    selection = registry.select("all")  # with all: skipped, with the reason
    assert name not in [b.name for b in selection.backends]
    assert "numpy" in [b.name for b in selection.backends]
    reasons = [why for n, why in selection.skipped if n == name]
    assert len(reasons) == 1 and "needs a GPU" in reasons[0]
    assert_numpy_still_works(registry)


def test_init_that_raises(fake):
    name = f"{fake.tag}-init"
    module = fake.backend_module("BadInit", name, extra='''
        def __init__(self):
            raise OSError("driver not loaded")
    ''')
    fake.distribution(fake.dist_name("init"), {name: f"{module}:BadInit"})
    registry = fake.registry()
    assert registry.availability(name)
    with pytest.raises(BackendUnavailable, match="failed to start") as info:
        registry.create(name)
    assert repr(name) in str(info.value) and "OSError: driver not loaded" in str(info.value)
    selection = registry.select("all")
    assert "numpy" in [b.name for b in selection.backends]
    assert any(n == name and "failed to start" in why for n, why in selection.skipped)
    assert_numpy_still_works(registry)


def test_availability_returning_non_availability(fake):
    name = f"{fake.tag}-notavail"
    module = fake.backend_module("Truthy", name, extra='''
        @classmethod
        def availability(cls):
            return True
    ''')
    fake.distribution(fake.dist_name("notavail"), {name: f"{module}:Truthy"})
    registry = fake.registry()
    with pytest.raises(PluginError, match="not an Availability"):
        registry.availability(name)
    assert_numpy_still_works(registry)


# By normbench.core.exceptions' contract ("every message says what was wrong, the value
# received, and the fix") and registry's ("a broken plugin becomes a problem naming
# its distribution and the fix"), start-up failures name the distribution and the fix.
@pytest.mark.parametrize("kind", ["init-raises", "not-an-availability"])
def test_startup_failures_name_distribution_and_fix(fake, kind):
    name = f"{fake.tag}-{kind}"
    body = {
        "init-raises": '''
            def __init__(self):
                raise OSError("driver not loaded")
        ''',
        "not-an-availability": '''
            @classmethod
            def availability(cls):
                return True
        ''',
    }[kind]
    module = fake.backend_module("Startup", name, extra=body)
    dist = fake.distribution(fake.dist_name("startup"), {name: f"{module}:Startup"})
    registry = fake.registry()
    with pytest.raises(normbench.NormbenchError) as info:
        registry.create(name)
    assert_names_distribution_and_fix(str(info.value), dist)


@pytest.mark.parametrize("body, what", [
    ("dtypes = ('fp16',)", "dtypes = ('fp16',) is not a non-empty sequence of float64, float32, float16, bfloat16"),
    ("dtypes = ()", "dtypes = () is not a non-empty sequence"),
    ("dtypes = 'float32'", "dtypes = 'float32' is not a non-empty sequence"),
    ("known_deviations = ['*-offset1e4']", "known_deviations must map test patterns to reasons"),
    ("known_deviations = {'* | (': 'why'}", "bad message regex '('"),
    ("operations = ('group_norm',)", "operations = ('group_norm',) is not a non-empty sequence of layer_norm, rms_norm"),
    ("operations = 'rms_norm'", "operations = 'rms_norm' is not a non-empty sequence"),
    ("operations = ('layer_norm', 'rms_norm')", "declares rms_norm in operations but does not define its entry point "
                                                "rms_norm(x, normalized_shape, weight, eps) -> y"),
    # normbench 0.2's spelling, deprecated: its message names what the class says
    ("normalizations = ('group_norm',)", "normalizations = ('group_norm',) is not a non-empty sequence of layer_norm, rms_norm"),
    ("normalizations = 'rms_norm'", "normalizations = 'rms_norm' is not a non-empty sequence"),
    ("normalizations = ('layer_norm', 'rms_norm')", "declares rms_norm in normalizations but does not define"),
])
def test_bad_class_declarations_are_plugin_errors(fake, body, what):
    name = f"{fake.tag}-decl"
    module = fake.backend_module("Declares", name, extra=body)
    dist = fake.distribution(fake.dist_name("decl"), {name: f"{module}:Declares"})
    registry = fake.registry()
    with pytest.raises(PluginError) as info:
        registry.load_class(name)
    assert what in str(info.value)
    assert_names_distribution_and_fix(str(info.value), dist)
    assert any(n == name and what in why for n, why in registry.select("all").skipped)
    assert_numpy_still_works(registry)


def test_an_rmsnorm_only_backend_defines_rms_norm_alone(fake):
    """Required: asarray, to_numpy and the entry point of each declared operation; nothing else."""
    name = f"{fake.tag}-rmsonly"
    module = fake.module(f"""
        from normbench import Backend

        class RmsOnly(Backend):
            name = {name!r}
            operations = ("rms_norm",)
            has_backward = False

            def asarray(self, host):
                return host

            def to_numpy(self, native):
                return native

            def rms_norm(self, x, normalized_shape, weight, eps):
                return x
    """)
    fake.distribution(fake.dist_name("rmsonly"), {name: f"{module}:RmsOnly"})
    registry = fake.registry()
    assert registry.load_class(name).operations == ("rms_norm",) and not hasattr(registry.create(name), "layer_norm")


def test_a_backend_missing_required_methods_is_a_plugin_error_not_a_start_failure(fake):
    name = f"{fake.tag}-abstract"
    module = fake.module(f"""
        from normbench import Backend

        class Abstract(Backend):
            name = {name!r}

            def asarray(self, host):
                return host
    """)
    dist = fake.distribution(fake.dist_name("abstract"), {name: f"{module}:Abstract"})
    registry = fake.registry()
    expected = r"it does not implement to_numpy \(abstract in normbench.Backend\)"
    with pytest.raises(PluginError, match=expected) as info:
        registry.load_class(name)
    assert_names_distribution_and_fix(str(info.value), dist)
    assert_numpy_still_works(registry)


# -- select -----------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["nope", "numpy,nope", "NUMPY"])
def test_select_unknown_name_lists_known(fake, spec):
    registry = fake.registry()
    with pytest.raises(UnknownBackend) as info:
        registry.select(spec)
    message = str(info.value)
    assert "unknown backend" in message and "known backends: " in message
    for known in registry.names:
        assert known in message
    assert "'all'" in message


@pytest.mark.parametrize("spec", ["", " ", ",", " , "])
def test_select_empty(fake, spec):
    registry = fake.registry()
    with pytest.raises(UnknownBackend, match="empty") as info:
        registry.select(spec)
    assert "numpy" in str(info.value)


@pytest.mark.parametrize("spec", ["all,numpy", "numpy,all", "all,all"])
def test_select_all_with_other_names(fake, spec):
    registry = fake.registry()
    with pytest.raises(UnknownBackend, match="cannot be combined"):
        registry.select(spec)


def test_select_dedups_and_keeps_order(fake):
    registry = fake.registry()
    selection = registry.select(" numpy , numpy ")
    assert [b.name for b in selection.backends] == ["numpy"]
    assert selection.skipped == []
