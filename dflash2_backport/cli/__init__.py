"""The command line: its options parsed, the run called, its report printed."""
