"""Finding vLLM: where it is and which version, the files the edits touch,
its RECORD, and the two modules the tool installs there."""
