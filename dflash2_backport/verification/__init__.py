"""`verify` and `verify --gpu`, and the files they run by path in the
interpreter that runs vLLM (probes.py, gpu_probes.py, checkpoints.py),
which import nothing of the tool."""
