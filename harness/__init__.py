"""normbench: a benchmark-and-verification harness for LayerNorm kernels.

``import harness`` loads NumPy only; torch, jax and triton load when a backend
that needs them is created.
"""

from harness.backend import Availability, Backend
from harness.exceptions import BackendUnavailable, InvalidInput, NormbenchError, PluginError, UnknownBackend
from harness.registry import get_registry, refresh

__version__ = "0.1.0"

__all__ = ["Availability", "Backend", "BackendUnavailable", "InvalidInput", "NormbenchError", "PluginError", "UnknownBackend",
           "get_registry", "refresh", "__version__"]
