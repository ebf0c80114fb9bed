"""Cases for the module probes, shared by the test files of this directory."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest


@dataclass(frozen=True)
class Case:
    """One check a probe runs: `check` is the probe function, `id` the test id."""

    id: str
    check: str
    params: dict = field(default_factory=dict)

    def as_json(self) -> dict:
        return {"id": self.id, "check": self.check, "params": self.params}


def case_ids(cases):
    return [case.id for case in cases]


def result_of(results: dict, case: Case) -> dict:
    """A case's result, failing with the probe's traceback if the check raised."""
    result = results[case.id]
    if "error" in result:
        pytest.fail(f"{case.check} raised in the probe:\n{result['traceback']}")
    return result
