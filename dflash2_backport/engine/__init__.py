"""Judging each file and planning what a command writes."""
