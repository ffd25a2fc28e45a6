"""normbench-vllm-cpu: vLLM's CPU ``fused_add_rms_norm`` as the normbench backend ``vllm-cpu``."""

from normbench_vllm_cpu.backends import VllmCpuFusedAddRmsNorm

__all__ = ["VllmCpuFusedAddRmsNorm"]
