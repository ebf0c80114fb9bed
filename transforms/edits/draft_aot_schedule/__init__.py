"""The edit `draft-aot-schedule`, on
vllm/v1/worker/gpu/spec_decode/dflash/speculator.py: its judge and
declaration (judge.py) and its libcst writer (writer.py).
"""
