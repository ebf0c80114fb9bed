"""A run of `check`, `apply` or `revert`: judging each file, planning what
the command writes, committing it, and the outcome."""
