"""The edit `compile-cache-key`, on vllm/config/speculative.py: its judge and
declaration (judge.py) and its libcst writer (writer.py).
"""
