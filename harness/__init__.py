"""normbench: a benchmark-and-verification harness for LayerNorm kernels.

``import normbench`` loads NumPy only; torch, jax and triton load when a backend
that needs them is created. The map of the package: docs/architecture.md.
"""

#: the one source of the version (pyproject.toml reads it); set before the imports below need it
__version__ = "0.2.0"

from normbench.core.backend import Availability, Backend, Limits
from normbench.core.exceptions import BackendUnavailable, InvalidInput, NormbenchError, PluginError, UnknownBackend
from normbench.core.registry import get_registry, refresh

__all__ = ["Availability", "Backend", "Limits", "BackendUnavailable", "InvalidInput", "NormbenchError", "PluginError",
           "UnknownBackend", "get_registry", "refresh", "__version__"]
