"""The edit `draft-max-position`, on vllm/config/speculative.py,
vllm/config/vllm.py: its judge and declarations (judge.py) and its libcst
writer (writer.py).
"""
