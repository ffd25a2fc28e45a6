"""normbench backend for Liger-Kernel's Triton LayerNorm and RMSNorm: ``liger``. Registered in this
package's ``pyproject.toml``::

    [project.entry-points."normbench.backends"]
    liger = "normbench_liger.backends:LigerBackend"

Importing this package imports neither torch, triton nor liger_kernel.
"""

__version__ = "0.1.0"
