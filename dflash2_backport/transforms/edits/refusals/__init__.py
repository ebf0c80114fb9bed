"""The edits `refuse-quant-draft`, `refuse-vocab-draft`, `refuse-speculators`,
on vllm/config/vllm.py, vllm/transformers_utils/configs/speculators/base.py:
its judge and declarations (judge.py) and its libcst writer (writer.py).
"""
