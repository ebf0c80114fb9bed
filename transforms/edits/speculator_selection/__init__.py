"""The edit `speculator-selection`, on
vllm/v1/worker/gpu/spec_decode/__init__.py, vllm/config/vllm.py: its judge
and declarations (judge.py) and its libcst writer (writer.py).
"""
