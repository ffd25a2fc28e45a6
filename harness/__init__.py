"""normbench: a benchmark-and-verification harness for normalization kernels.

``import normbench`` loads NumPy only; torch, jax and triton load when a backend
that needs them is created. The map of the package: docs/architecture.md. Backend
authors: ``normbench.Backend`` and the kit, ``normbench.kit`` (docs/writing-a-backend.md).
"""

#: the one source of the version (pyproject.toml reads it); set before the imports below need it
__version__ = "0.3.0"

import os as _os

from normbench.core import moved as _moved
from normbench.core.backend import Availability, Backend, Limits
from normbench.core.exceptions import BackendUnavailable, InvalidInput, NormbenchError, PluginError, UnknownBackend
from normbench.core.operations import OPERATIONS
from normbench.core.registry import get_registry, refresh

_moved.install()
# JAX takes 75 % of a GPU's memory in every process that imports it (normbench's, each worker's), which starves
# torch beside it or fails JAX's own start in the next process; no normbench process preallocates (a user's own
# setting wins). Set here, before any backend can import JAX (harness/kit/jax.py says so too).
_os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

__all__ = ["Availability", "Backend", "Limits", "OPERATIONS", "BackendUnavailable", "InvalidInput", "NormbenchError",
           "PluginError", "UnknownBackend", "get_registry", "refresh", "__version__"]
