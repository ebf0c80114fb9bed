"""The edit `refuse-speculators`, on
vllm/transformers_utils/configs/speculators/base.py: its judge and
declaration (judge.py) and its libcst writer (writer.py).
"""
