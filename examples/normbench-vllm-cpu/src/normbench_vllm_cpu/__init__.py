"""normbench-vllm-cpu: vLLM's CPU ``fused_add_rms_norm`` as the normbench backend ``vllm-cpu``, and its int8
activation quantization after RMSNorm as ``vllm-cpu-int8``."""

from normbench_vllm_cpu.backends import VllmCpuFusedAddRmsNorm, VllmCpuInt8Quant

__all__ = ["VllmCpuFusedAddRmsNorm", "VllmCpuInt8Quant"]
