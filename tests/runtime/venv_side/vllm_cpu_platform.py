"""vLLM platform plugin that selects vLLM's own CPU platform.

The CUDA build of vLLM resolves to UnspecifiedPlatform on a machine without a
GPU, and then even an empty VllmConfig cannot be built. Entry point group
`vllm.platform_plugins` is consulted before any built-in detection, so this
wins regardless of import order; VLLM_PLUGINS=none turns it off.
"""


def cpu_platform() -> str:
    return "vllm.platforms.cpu.CpuPlatform"
