"""The ``triton`` backend: normbench's own Triton kernels under the harness, LayerNorm and RMSNorm, plain
and with the residual add fused in (``add_layer_norm``, ``add_rms_norm``), and the four with their output
quantized by a static scale (``*_quant``) or one scale per row (``*_dynamic_quant``): float8 e4m3fn or e5m2, int8;
forward only, as inference runs them.

On a machine with a CUDA device the kernels are compiled and run there; on one
without, they run in the Triton interpreter on CPU (``normbench.kit.triton``
says how that is decided), and the backend says so: its device is
"interpreter (CPU; not for timing)". The interpreter runs every program of a
grid one after another in NumPy, so it is slow: there ``max_elements`` caps the
cases it takes at ``INTERPRETER_MAX_ELEMENTS`` (every case of the suites today, up
to 65537 x 8; a GPU-sized case such as a 2**31-element index-overflow case
would take hours), ``NORMBENCH_TRITON_MAX_ELEMENTS`` overrides it (0: no cap),
and larger cases are skipped with that reason. Compiled on CUDA there is no cap.
Under the interpreter its ``timing_note`` says timings would mean nothing there, so the
throughput suite skips it with that reason while the conformance suites run, and its
``runtime_note`` says what the interpreter computes differently from a GPU (a failure that
the interpreter explains says so).

Importing this module imports neither torch nor triton: ``normbench list``
reads the class attributes. They load when the backend is created.
"""

from __future__ import annotations

from normbench.kit import device_label
from normbench.kit import torch as torch_arrays
from normbench.kit.triton import INTERPRETER_DEVICE, RUNTIME_NOTE, TIMING_NOTE, ensure_mode, interpreter_max_elements

#: the default cap under the interpreter (about 5 s for a forward of that size on one core)
INTERPRETER_MAX_ELEMENTS = 1 << 20

class TritonBackend(torch_arrays.AutogradBackend):
    name = "triton"
    description = ("normbench's Triton kernels (impls/triton): LayerNorm and RMSNorm, plain or with the residual add "
                   "fused in, fp32 statistics (two-pass for LayerNorm), deterministic persistent backward; their output "
                   "quantized to float8 or int8 by a static or a per-row scale; CUDA, or the Triton interpreter on CPU")
    operations = ("layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm", "layer_norm_quant", "rms_norm_quant",
                  "add_layer_norm_quant", "add_rms_norm_quant", "layer_norm_dynamic_quant", "rms_norm_dynamic_quant",
                  "add_layer_norm_dynamic_quant", "add_rms_norm_dynamic_quant")
    strided = True
    requires = ("triton", "torch")
    install_hint = "pip install 'normbench[triton]'"
    devices = "cuda, or the Triton interpreter on CPU"

    def __init__(self) -> None:
        self.mode = ensure_mode()
        import torch

        from normbench.impls.triton import autograd, launch

        self.torch, self.launch, self.autograd = torch, launch, autograd
        if self.mode.interpreter:
            self._device = torch.device("cpu")
            self.device = INTERPRETER_DEVICE
            self.max_elements = interpreter_max_elements(INTERPRETER_MAX_ELEMENTS)
            self.timing_note = TIMING_NOTE
            self.runtime_note = RUNTIME_NOTE
            return
        if not torch.cuda.is_available():
            raise RuntimeError(f"the Triton kernels are set to compile ({self.mode.reason}) but no CUDA device "
                               f"is present; unset TRITON_INTERPRET to run them in the interpreter on CPU")
        self._device = torch.device("cuda", torch.cuda.current_device())
        self.device = device_label("cuda", self._device.index, torch.cuda.get_device_name(self._device))

    def asarray(self, host):
        """Keeps host's layout: strides, storage offset and stride-0 broadcasts."""
        return torch_arrays.from_host(self.torch, host, self._device)

    def to_numpy(self, native):
        return torch_arrays.to_host(self.torch, native)

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        return self.launch.forward(x, normalized_shape, weight, bias, eps)[0]

    def layer_norm_statistics(self, x, normalized_shape, weight, bias, eps):
        return self.launch.forward(x, normalized_shape, weight, bias, eps)[1:]

    def layer_norm_with_statistics(self, x, normalized_shape, weight, bias, eps):
        """One forward launch: y and the statistics it saves for the backward."""
        y, mean, rstd = self.launch.forward(x, normalized_shape, weight, bias, eps)
        return y, (mean, rstd)

    def set_threads(self, threads):
        """torch's CPU threads: the interpreter's host work, and the tensors' copies."""
        return torch_arrays.set_threads(self.torch, threads)

    def autograd_forward(self, op, args):
        """Through the autograd function, as a PyTorch user would run it (the backward: AutogradBackend)."""
        return getattr(self.autograd, op)(*args)

    def warmup(self, op, args):
        """Compile (on CUDA) every kernel that arguments like these launch, forward and
        backward (a quantized operation has none), and wait: Triton compiles per dtype, flags and block sizes."""
        outputs = getattr(self, op)(*args)  # y, or a fused operation's (y, residual_out): one cotangent each
        if op.endswith("_quant"):  # static and dynamic
            self.synchronize()
            return
        cotangents = tuple(self.torch.zeros_like(o) for o in (outputs if isinstance(outputs, tuple) else (outputs,)))
        self.forward_backward(op, args, cotangents)
        self.synchronize()

    # -- RMSNorm: the same kernels with CENTERED off (impls/triton/forward_kernels.py) ---------

    def rms_norm(self, x, normalized_shape, weight, eps):
        """eps None: ``normbench.core.dtypes.default_rms_eps`` of x's dtype, as torch does."""
        return self.launch.rms_forward(x, normalized_shape, weight, eps)[0]

    # -- the residual add fused in: the same kernels with HAS_RESIDUAL (backward: AutogradBackend.fused_backward) --

    def add_layer_norm(self, x, residual, normalized_shape, weight, bias, eps):
        return self.launch.add_forward(x, residual, normalized_shape, weight, bias, eps)[:2]

    def add_rms_norm(self, x, residual, normalized_shape, weight, eps):
        return self.launch.add_rms_forward(x, residual, normalized_shape, weight, eps)[:2]

    # -- the output quantized: the same kernels storing codes (QUANT; forward only), a static scale first ------------

    def layer_norm_quant(self, x, normalized_shape, weight, bias, eps, scale, qdtype):
        return self.launch.quant_forward(x, None, normalized_shape, weight, bias, eps, scale, qdtype, centered=True)[0]

    def rms_norm_quant(self, x, normalized_shape, weight, eps, scale, qdtype):
        return self.launch.quant_forward(x, None, normalized_shape, weight, None, eps, scale, qdtype, centered=False)[0]

    def add_layer_norm_quant(self, x, residual, normalized_shape, weight, bias, eps, scale, qdtype):
        return self.launch.quant_forward(x, residual, normalized_shape, weight, bias, eps, scale, qdtype, centered=True)

    def add_rms_norm_quant(self, x, residual, normalized_shape, weight, eps, scale, qdtype):
        return self.launch.quant_forward(x, residual, normalized_shape, weight, None, eps, scale, qdtype,
                                         centered=False)

    # -- one scale per row (DYNAMIC): (q, scales), the fused ones residual_out last --------------------------------

    def layer_norm_dynamic_quant(self, x, normalized_shape, weight, bias, eps, qdtype, scale_ub):
        return self.launch.dynamic_quant_forward(x, None, normalized_shape, weight, bias, eps, qdtype, scale_ub,
                                                 centered=True)[:2]

    def rms_norm_dynamic_quant(self, x, normalized_shape, weight, eps, qdtype, scale_ub):
        return self.launch.dynamic_quant_forward(x, None, normalized_shape, weight, None, eps, qdtype, scale_ub,
                                                 centered=False)[:2]

    def add_layer_norm_dynamic_quant(self, x, residual, normalized_shape, weight, bias, eps, qdtype, scale_ub):
        return self.launch.dynamic_quant_forward(x, residual, normalized_shape, weight, bias, eps, qdtype, scale_ub,
                                                 centered=True)

    def add_rms_norm_dynamic_quant(self, x, residual, normalized_shape, weight, eps, qdtype, scale_ub):
        return self.launch.dynamic_quant_forward(x, residual, normalized_shape, weight, None, eps, qdtype, scale_ub,
                                                 centered=False)

    def synchronize(self):
        if self._device.type == "cuda":
            self.torch.cuda.synchronize(self._device)
