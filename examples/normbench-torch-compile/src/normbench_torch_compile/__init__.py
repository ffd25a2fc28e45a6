"""normbench-torch-compile: ``torch.compile`` of PyTorch's LayerNorm and RMSNorm as a normbench backend.

The backend class lives in :mod:`normbench_torch_compile.backends`; it imports torch only when created.
"""
