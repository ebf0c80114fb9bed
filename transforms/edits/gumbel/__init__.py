"""The edit `gumbel`, on vllm/v1/worker/gpu/sample/gumbel.py: its judge and
declaration (judge.py) and its libcst writer (writer.py).
"""
