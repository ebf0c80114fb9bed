"""The edit `draft-noise-salt`, on vllm/v1/worker/gpu/sample/gumbel.py,
vllm/v1/worker/gpu/spec_decode/speculator.py,
vllm/v1/worker/gpu/spec_decode/dspark/speculator.py: its judge and
declarations (judge.py) and its libcst writer (writer.py).
"""
