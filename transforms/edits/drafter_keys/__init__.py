"""The edit `drafter-keys`, on vllm/model_executor/models/qwen3_dflash.py:
its judge and declaration (judge.py) and its libcst writer (writer.py).
"""
