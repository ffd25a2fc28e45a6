"""Backend discovery through the entry-point group ``normbench.backends``.

Built-in backends are registered in normbench's own ``pyproject.toml`` exactly
as a third-party plugin registers its own::

    [project.entry-points."normbench.backends"]
    mine = "my_package.module:MyBackend"

Nothing is imported until a backend is used: :func:`get_registry` reads
metadata only; :meth:`Registry.load_class` imports the plugin's module (which
must not import heavy frameworks at top level); :meth:`Registry.create`
instantiates it (where heavy frameworks load). A broken plugin becomes a
:class:`PluginProblem` naming its distribution and the fix, never a crash of
the whole run; one that would end or hang the process while loading is found
first in a child process (:mod:`normbench.core.vetting`) by :meth:`Registry.select`.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from normbench.core import deviations, operations, safe_text, vetting
from normbench.core.backend import Availability, Backend
from normbench.core.dtypes import DTYPES
from normbench.core.exceptions import BackendUnavailable, NormbenchError, PluginError, UnknownBackend

GROUP = "normbench.backends"
#: reserved by ``--impl=all``
ALL = "all"
_NAME = re.compile(r"^[a-z][a-z0-9_]*(-[a-z0-9_]+)*$")
HOWTO = "see docs/writing-a-backend.md"
#: the distribution whose backends are loaded in process without a trial (:mod:`normbench.core.vetting`)
OURS = "normbench"


@dataclass(frozen=True)
class Plugin:
    """One registered backend: entry-point name, target and who provides it."""

    name: str
    target: str
    distribution: str
    version: str
    #: where its distribution is installed (its metadata's folder), "" where unknown
    origin: str = ""

    @property
    def provider(self) -> str:
        return f"{self.distribution} {self.version}".strip()


@dataclass(frozen=True)
class PluginProblem:
    """A plugin that cannot be used, with the fix in ``message``."""

    name: str
    distribution: str
    message: str


@dataclass
class Selection:
    """What ``--impl`` resolved to: the backends to run, those left out (name,
    reason), and plugin problems that left nothing out (a name clash)."""

    backends: list[Backend] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _distribution_of(ep: importlib.metadata.EntryPoint) -> tuple[str, str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "unknown distribution", "", ""
    return dist.metadata["Name"] or "unknown distribution", dist.version or "", str(getattr(dist, "_path", ""))


def class_problem(cls: type[Backend]) -> str:
    """What is wrong with a Backend subclass's declarations (and the fix), or ""."""
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if missing:
        return (f"it does not implement {', '.join(missing)} (abstract in normbench.Backend). "
                f"Fix: implement them; {HOWTO}")
    dtypes = getattr(cls, "dtypes", ())
    if isinstance(dtypes, str) or not dtypes or not set(dtypes) <= set(DTYPES):
        return (f"dtypes = {dtypes!r} is not a non-empty sequence of {', '.join(DTYPES)}. "
                f"Fix: declare e.g. dtypes = ('float32', 'bfloat16')")
    declared, said = cls.operations, cls.operations_attribute
    if isinstance(declared, str) or not declared or not set(declared) <= set(operations.NAMES):
        return (f"{said} = {declared!r} is not a non-empty sequence of {', '.join(operations.NAMES)}. "
                f"Fix: declare e.g. operations = ('layer_norm', 'rms_norm')")
    for name in declared:
        op = operations.of(name)
        if not callable(getattr(cls, op.entry, None)):
            return (f"it declares {name} in {said} but does not define its entry point {op.signature()}. "
                    f"Fix: implement {op.entry}, or leave {name!r} out of {said}")
    return deviations.declaration_problem(cls)


class Registry:
    """The backends found in one set of entry points (see :func:`get_registry`)."""

    def __init__(self, entry_points: list[importlib.metadata.EntryPoint]) -> None:
        self.plugins: dict[str, Plugin] = {}
        self.problems: list[PluginProblem] = []
        self._classes: dict[str, type[Backend]] = {}
        claims: dict[str, list[Plugin]] = {}
        for ep in entry_points:
            dist, version, origin = _distribution_of(ep)
            plugin = Plugin(ep.name, ep.value, dist, version, origin)
            if ep.name == ALL or not _NAME.match(ep.name):
                self.problems.append(PluginProblem(ep.name, dist, (
                    f"backend name {ep.name!r} from distribution {dist} is not valid: use lowercase "
                    f"letters, digits, '_' and '-', starting with a letter, and not {ALL!r}. "
                    f"Fix: rename the entry point in {dist}'s [project.entry-points.\"{GROUP}\"]")))
                continue
            claims.setdefault(ep.name, []).append(plugin)
        for name, claimants in sorted(claims.items()):
            # normbench's own built-ins win a clash, then the first distribution by name
            claimants.sort(key=lambda p: (p.distribution != OURS, p.distribution))
            self.plugins[name] = claimants[0]
            if len(claimants) > 1:
                who = ", ".join(f"{p.distribution} ({p.target})" for p in claimants)
                self.problems.append(PluginProblem(name, claimants[1].distribution, (
                    f"backend name {name!r} is claimed by several distributions: {who}; "
                    f"using {claimants[0].distribution}'s. Fix: uninstall one or rename its entry point")))

    @property
    def names(self) -> list[str]:
        return sorted(self.plugins)

    def plugin(self, name: str) -> Plugin:
        try:
            return self.plugins[name]
        except KeyError:
            known = ", ".join(self.names) or "none"
            raise UnknownBackend(
                f"unknown backend {name!r}; known backends: {known} (or {ALL!r}). "
                f"Install a plugin that provides it, {HOWTO}") from None

    def load_class(self, name: str) -> type[Backend]:
        """Import the backend's class (light: its module must not import heavy frameworks)."""
        if name in self._classes:
            return self._classes[name]
        plugin = self.plugin(name)
        module, _, attr = plugin.target.partition(":")
        where = f"backend {name!r} from distribution {plugin.provider} ({plugin.target})"
        try:
            obj = importlib.import_module(module)
            for part in attr.split(".") if attr else ():
                obj = getattr(obj, part)
        except (Exception, SystemExit) as exc:  # a plugin's import may fail in any way
            raise PluginError(f"{where} failed to import: {type(exc).__name__}: {exc}. "
                              f"Fix: install what it needs, or uninstall {plugin.distribution}") from exc
        if not (isinstance(obj, type) and issubclass(obj, Backend)):
            raise PluginError(f"{where} is not a normbench.Backend subclass (got {obj!r}). "
                              f"Fix: point the entry point at a Backend subclass; {HOWTO}")
        if getattr(obj, "name", None) != name:
            raise PluginError(f"{where} declares name = {getattr(obj, 'name', None)!r}, but its entry point "
                              f"is {name!r}. Fix: make the class attribute `name` equal the entry-point name")
        problem = class_problem(obj)
        if problem:
            raise PluginError(f"{where}: {problem}")
        self._classes[name] = obj
        return obj

    def availability(self, name: str) -> Availability:
        """Whether ``name`` can run here (imports its module, never its framework)."""
        cls = self.load_class(name)
        try:
            result = cls.availability()
        except Exception as exc:
            raise PluginError(f"backend {name!r} from distribution {self.plugin(name).provider}: "
                              f"availability() raised {type(exc).__name__}: {exc}. "
                              f"Fix: availability() must return an Availability, not raise") from exc
        if not isinstance(result, Availability):
            raise PluginError(f"backend {name!r} from distribution {self.plugin(name).provider}: availability() "
                              f"returned {result!r}, not an Availability. Fix: return Availability.yes() or "
                              f"Availability.no(reason)")
        return result

    def create(self, name: str) -> Backend:
        """An instance of backend ``name``, or :class:`BackendUnavailable` saying why not."""
        cls = self.load_class(name)
        available = self.availability(name)
        if not available:
            raise BackendUnavailable(f"backend {name!r} is not available: {available.reason}")
        try:
            return cls()
        except Exception as exc:
            raise BackendUnavailable(
                f"backend {name!r} from distribution {self.plugin(name).provider} is not available: it failed to "
                f"start: {type(exc).__name__}: {exc}. Fix: check its framework's installation and device, or "
                f"report it to {self.plugin(name).distribution}'s authors") from exc

    def select(self, spec: str, progress: Callable[[str, Backend | str], None] | None = None,
               create: Callable[[str], Backend] | None = None) -> Selection:
        """Resolve a backend selection (``--impl`` of the CLI, ``--normbench-impl`` of pytest):
        ``"torch"``, ``"numpy,torch"`` or ``"all"``.

        A named backend that cannot run raises; with ``all`` it is skipped and
        listed in :attr:`Selection.skipped` with its reason. Plugins of other distributions are
        first tried in a child process (:func:`normbench.core.vetting.vet`): one that ends or hangs it
        is never loaded here. ``progress(name, result)``,
        if given, is called as each backend is created (creating one imports its framework,
        seconds): with the backend, or with the reason it was skipped. ``create``: how a backend is made from
        its name (default :meth:`create`; ``--untrusted``'s is :func:`normbench.core.remote.start`, which makes it
        in a worker process of its own, never loaded here).
        """
        report = progress or (lambda name, result: None)
        create = create or self.create
        names = self.names_in(spec)
        selection = Selection(warnings=[p.message for p in self.problems if p.name in self.plugins])
        unsafe = vetting.vet(self, [n for n in names if self.plugins[n].distribution != OURS],
                             child=[sys.executable, "-c", _TRY_LOADING])
        if spec.strip() == ALL:
            selection.skipped += [(p.name, p.message) for p in self.problems if p.name not in self.plugins]
            for name in names:
                try:
                    if name in unsafe:
                        raise PluginError(unsafe[name])
                    selection.backends.append(create(name))
                except NormbenchError as exc:
                    selection.skipped.append((name, str(exc)))
                    report(name, str(exc))
                else:
                    report(name, selection.backends[-1])
            return selection
        for name in names:
            if name in unsafe:
                raise PluginError(unsafe[name])
            selection.backends.append(create(name))
            report(name, selection.backends[-1])
        return selection

    def names_in(self, spec: str) -> list[str]:
        """The backend names a selection ``spec`` names (``all``: every registered one), checked
        against the registry without creating any: an unknown or empty name raises UnknownBackend."""
        names = [n.strip() for n in spec.split(",")]
        if not any(names):
            raise UnknownBackend(f"the backend list is empty; choose from: {', '.join(self.names)} (or {ALL!r})")
        if names == [ALL]:
            return list(self.names)
        for name in names:
            if name == ALL:
                raise UnknownBackend(f"{ALL!r} cannot be combined with other names")
            if not name:
                raise UnknownBackend(f"{spec!r} has an empty name between commas; e.g. numpy,torch")
            self.plugin(name)
        return list(dict.fromkeys(names))


def describe(backend: Backend) -> str:
    """``torch (2.13.0+cpu, cpu)``: name, library version and device (:attr:`Backend.device`, the
    string ``normbench list --probe`` shows and the results record), as run headers show a backend (the plugin's
    own text escaped and clipped: :mod:`normbench.core.safe_text`)."""
    version = type(backend).library_version()
    return safe_text.safe(f"{backend.name} ({version + ', ' if version else ''}{backend.device})", 300)


@functools.lru_cache(maxsize=1)
def get_registry() -> Registry:
    """The registry of installed backends (cached; :func:`refresh` re-reads)."""
    return Registry(list(importlib.metadata.entry_points(group=GROUP)))


def refresh() -> Registry:
    """Forget the cached registry (after installing a plugin) and read it again."""
    get_registry.cache_clear()
    return get_registry()


def try_loading(progress_file: str, names: Sequence[str]) -> None:
    """The work of :func:`normbench.core.vetting.vet`'s child process: import, ask and create each plugin in turn,
    writing which one it is on to ``progress_file`` ("" when done). A plugin that raises is fine here (the
    selection says why in its own process); only ending or hanging the process counts."""
    from normbench.core.files import write_atomic

    write_atomic(progress_file, "")  # started: from here on the plugins' limits count (core.vetting.watch)
    registry = get_registry()
    for name in names:
        write_atomic(progress_file, f"{name}\t{registry.plugin(name).provider}")
        try:
            registry.create(name)
        except NormbenchError:
            pass
    write_atomic(progress_file, "")



#: the child process of :func:`normbench.core.vetting.vet`: ``python -c`` this, the progress file, the names
_TRY_LOADING = "import sys; from normbench.core.registry import try_loading; try_loading(sys.argv[1], sys.argv[2:])"
