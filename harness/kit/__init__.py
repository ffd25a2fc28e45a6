"""The public kit for backend authors: what a backend's own code may import from normbench besides
``normbench.Backend`` (docs/writing-a-backend.md). Every name here is public and documented; the
example plugins and normbench's own built-in backends import nothing else.

* here: :func:`device_label` (a ``device`` string in the form normbench records), the dtypes
  (:data:`DTYPES`, :func:`dtype_name`, :func:`host_dtype`: host arrays' NumPy types, bfloat16 from
  ml_dtypes), :func:`default_rms_eps` (what RMSNorm's ``eps=None`` means), :class:`Limits`;
* :mod:`normbench.kit.torch`: torch tensors from host arrays and back, keeping the layout, and
  :class:`~normbench.kit.torch.AutogradBackend`, the base of an autograd-based backend;
* :mod:`normbench.kit.jax`: :class:`~normbench.kit.jax.JaxBackend`, the base of a backend whose forward
  is a JAX function and whose backward is ``jax.vjp`` of it;
* :mod:`normbench.kit.triton`: where Triton kernels run (compiled, or the interpreter on CPU) and what
  ``ptxas`` says of a kernel's registers;
* :mod:`normbench.kit.layout`: a NumPy view as (buffer, shape, strides, offset), for strided backends;
* :mod:`normbench.kit.composed`: :class:`~normbench.kit.composed.QuantizedFromParts`, the quantized operations'
  entry points composed from a backend's base operations and its quantizer;
* :mod:`normbench.kit.testing`: what a plugin's own tests need (its framework not imported by
  ``normbench list``, its doctests, the suites run on it and their outcomes read).

Importing the kit imports NumPy only; each submodule imports its framework when used.

>>> device_label("cuda", 0, "NVIDIA H100 80GB HBM3"), default_rms_eps("bfloat16")
('cuda:0 (NVIDIA H100 80GB HBM3)', 1.1920928955078125e-07)
"""

from normbench.core.backend import Availability, Limits, device_label
from normbench.core.dtypes import DTYPES, default_rms_eps, dtype_name, host_dtype

__all__ = ["Availability", "DTYPES", "Limits", "default_rms_eps", "device_label", "dtype_name", "host_dtype"]
