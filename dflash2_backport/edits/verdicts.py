"""Hunk states and verdicts, for the tool's own modules.

The vocabulary lives with the edits (transforms/vocabulary.py), which import
nothing of the tool; this is where the tool takes it from.
"""

from __future__ import annotations

from . import transforms

Direction = transforms.vocabulary.Direction
EditReport = transforms.vocabulary.EditReport
EditSet = transforms.vocabulary.EditSet
Fix = transforms.vocabulary.Fix
Goal = transforms.vocabulary.Goal
HunkVerdict = transforms.vocabulary.HunkVerdict
State = transforms.vocabulary.State

__all__ = ["Direction", "EditReport", "EditSet", "Fix", "Goal", "HunkVerdict", "State"]
