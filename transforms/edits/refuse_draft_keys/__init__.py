"""The edit `refuse-draft-keys`, on vllm/config/vllm.py: its judge and
declaration (judge.py) and its libcst writer (writer.py).
"""
