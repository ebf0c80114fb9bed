"""The commands, their outcome, report and `--diff`: the top of the tool."""
