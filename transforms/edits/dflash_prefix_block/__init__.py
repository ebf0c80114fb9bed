"""The edit `dflash-prefix-block`, on vllm/v1/core/sched/scheduler.py: its
judge and declaration (judge.py) and its libcst writer (writer.py).
"""
