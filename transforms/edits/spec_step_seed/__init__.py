"""The edit `spec-step-seed`, on vllm/v1/worker/gpu/sample/gumbel.py,
vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py: its judge and
declarations (judge.py) and its libcst writer (writer.py).
"""
