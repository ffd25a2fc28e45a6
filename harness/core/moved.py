"""normbench 0.2's module paths, kept for plugins written against them.

The rooms moved (docs/architecture.md): ``normbench.backend`` is ``normbench.core.backend``, the
torch and JAX plumbing of ``normbench.impls`` is the public kit (``normbench.kit.torch``,
``normbench.kit.jax``). A plugin that still imports an old path keeps working: :func:`install` puts
a finder on ``sys.meta_path`` that answers each old name with a module forwarding every attribute to
the new one, and warns once (DeprecationWarning) naming the new path. Nothing inside normbench
imports an old path (``tests/test_layering.py``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Any

#: old module -> where it lives now
MOVED: dict[str, str] = {
    **{f"normbench.{m}": f"normbench.core.{m}" for m in (
        "backend", "registry", "exceptions", "dtypes", "cases", "deviations", "environment", "run_folder", "files",
        "machine", "provenance", "interrupts")},
    "normbench.norms": "normbench.core.operations",
    "normbench.layout": "normbench.kit.layout",
    "normbench.impls.torch_arrays": "normbench.kit.torch",
    "normbench.impls.jax_support": "normbench.kit.jax",
    "normbench.impls.triton.runtime": "normbench.kit.triton",
}


class _Forwarding(types.ModuleType):
    """A module whose attributes are another module's."""

    def __init__(self, name: str, target: str) -> None:
        super().__init__(name, f"moved to {target} (normbench.core.moved)")
        self.__target = target

    def __getattr__(self, attribute: str) -> Any:
        return getattr(importlib.import_module(self.__target), attribute)

    def __dir__(self) -> list[str]:
        return dir(importlib.import_module(self.__target))


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        new = MOVED[spec.name]
        warnings.warn(f"{spec.name} moved to {new} (normbench 0.3); import it from there. The old path keeps "
                      f"working, with this warning, through the 0.x releases", DeprecationWarning, stacklevel=2)
        importlib.import_module(new)
        return _Forwarding(spec.name, new)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def install() -> None:
    """Answer the old module paths (once per process)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
