"""The edit `registry`, on vllm/model_executor/models/registry.py: its judge
and declaration (judge.py) and its libcst writer (writer.py).
"""
