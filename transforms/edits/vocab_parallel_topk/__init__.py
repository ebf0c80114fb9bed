"""The edit `vocab-parallel-topk`, on
vllm/model_executor/layers/logits_processor.py: its judge and declaration
(judge.py) and its libcst writer (writer.py).
"""
