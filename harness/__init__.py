"""normbench: a benchmark-and-verification harness for normalization kernels.

``import normbench`` loads NumPy only; torch, jax and triton load when a backend
that needs them is created. The map of the package: docs/architecture.md. Backend
authors: ``normbench.Backend`` and the kit, ``normbench.kit`` (docs/writing-a-backend.md).
"""

#: the one source of the version (pyproject.toml reads it); set before the imports below need it
__version__ = "0.3.0"

from normbench.core import moved as _moved
from normbench.core.backend import Availability, Backend, Limits
from normbench.core.exceptions import BackendUnavailable, InvalidInput, NormbenchError, PluginError, UnknownBackend
from normbench.core.operations import OPERATIONS
from normbench.core.registry import get_registry, refresh

_moved.install()

__all__ = ["Availability", "Backend", "Limits", "OPERATIONS", "BackendUnavailable", "InvalidInput", "NormbenchError",
           "PluginError", "UnknownBackend", "get_registry", "refresh", "__version__"]
