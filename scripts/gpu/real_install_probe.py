"""What a venv made by real_install_venv.sh runs on: one `key: value` line
each, from inside the venv's interpreter.

    STORE/venv-0.27.1/bin/python scripts/gpu/real_install_probe.py

torch (version, file, CUDA build, the GPU), cuDNN and NCCL as torch reports
them, the CUDA libraries the process has loaded (from /proc/self/maps: the
venv's or the machine's), a cuBLAS matmul and a cuDNN convolution, vLLM's
version, file and platform, FlashAttention 3: its own extension
(`vllm.vllm_flash_attn._vllm_fa3_C`) imported, its ops registered, the
version vLLM picks and one varlen call checked against a torch reference,
and FlashInfer's version. Each line is printed as it is known; a failure is
printed as `NAME: FAILED ...` and the rest still run.
"""

from __future__ import annotations

import os
import sys
import traceback


def line(key: str, value: object) -> None:
    print(f"{key}: {value}", flush=True)


def attempt(key: str, function) -> object:
    try:
        return function()
    except BaseException as exc:  # noqa: BLE001 - every failure is a finding
        line(key, f"FAILED {type(exc).__name__}: {exc}".splitlines()[0][:400])
        traceback.print_exc(limit=3)
        return None


def loaded_libraries() -> list[str]:
    names = ("libcublas", "libcudnn.so", "libnccl", "libcusparseLt", "libnvshmem",
             "libcudart", "libnvrtc", "libcufft", "libtorch_cuda", "_vllm_fa3_C",
             "_C_stable_libtorch", "libtriton")
    seen = []
    with open("/proc/self/maps") as maps:
        for row in maps:
            path = row.split()[-1] if len(row.split()) >= 6 else ""
            if any(name in path for name in names) and path not in seen:
                seen.append(path)
    return seen


def main() -> int:
    line("python", f"{sys.version.split()[0]} {sys.executable} prefix={sys.prefix}")
    import torch

    line("torch", f"{torch.__version__} {torch.__file__}")
    line("cuda", f"build {torch.version.cuda}, available {torch.cuda.is_available()}, "
         f"{torch.cuda.get_device_name(0)}, capability {torch.cuda.get_device_capability(0)}")
    line("cudnn", attempt("cudnn", lambda: torch.backends.cudnn.version()))
    line("nccl", attempt("nccl", lambda: torch.cuda.nccl.version()))

    def compute():
        a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
        matmul = float((a @ a).float().abs().mean())
        conv = torch.nn.functional.conv2d(torch.randn(1, 3, 16, 16, device="cuda"),
                                          torch.randn(4, 3, 3, 3, device="cuda"))
        torch.cuda.synchronize()
        return f"matmul mean {matmul:.3f}, conv {tuple(conv.shape)}"

    line("cuda-compute", attempt("cuda-compute", compute))
    import triton

    line("triton", f"{triton.__version__} {triton.__file__}")
    import vllm

    line("vllm", f"{vllm.__version__} {vllm.__file__}")
    from vllm.platforms import current_platform

    line("platform", type(current_platform).__name__)

    def fa3():
        from vllm.vllm_flash_attn import _vllm_fa3_C  # noqa: F401 - FlashAttention's own extension

        return f"{_vllm_fa3_C.__file__}; ops {sorted(torch.ops._vllm_fa3_C.__dir__())[:6]}"

    line("fa3-extension", attempt("fa3-extension", fa3))

    def fa_version():
        from vllm.v1.attention.backends.fa_utils import get_flash_attn_version

        return get_flash_attn_version()

    line("fa3-version-vllm-picks", attempt("fa3-version-vllm-picks", fa_version))

    def fa3_call():
        from vllm.vllm_flash_attn import flash_attn_varlen_func

        torch.manual_seed(0)
        lengths = [5, 11]
        heads, kv_heads, dim = 4, 2, 128
        total = sum(lengths)
        q = torch.randn(total, heads, dim, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(total, kv_heads, dim, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(total, kv_heads, dim, device="cuda", dtype=torch.bfloat16)
        cu = torch.tensor([0, 5, 16], device="cuda", dtype=torch.int32)
        out = flash_attn_varlen_func(q, k, v, max_seqlen_q=11, cu_seqlens_q=cu,
                                     max_seqlen_k=11, cu_seqlens_k=cu, causal=True,
                                     fa_version=3)
        worst = 0.0
        for start, length in zip([0, 5], lengths):
            qs, ks, vs = (t[start:start + length].float().transpose(0, 1) for t in (q, k, v))
            ks = ks.repeat_interleave(heads // kv_heads, 0)
            vs = vs.repeat_interleave(heads // kv_heads, 0)
            ref = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True)
            got = out[start:start + length].float().transpose(0, 1)
            worst = max(worst, float((ref - got).abs().max()))
        return f"varlen causal bf16, max abs error against torch {worst:.4f}"

    line("fa3-call", attempt("fa3-call", fa3_call))

    def flashinfer():
        import flashinfer

        return f"{flashinfer.__version__} {flashinfer.__file__}"

    line("flashinfer", attempt("flashinfer", flashinfer))
    for path in loaded_libraries():
        line("loaded", path)
    line("env", {k: v for k, v in os.environ.items() if k.startswith(("VLLM_", "CUDA_"))})
    return 0


if __name__ == "__main__":
    sys.exit(main())
