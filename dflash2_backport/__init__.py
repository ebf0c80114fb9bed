"""Backport DFlash2 speculative decoding to vLLM 0.27.1."""

__version__ = "0.1.0"
