"""The edit `live-model-len`, on vllm/v1/worker/gpu/spec_decode/speculator.py:
its judge and declaration (judge.py) and its libcst writer (writer.py).
"""
