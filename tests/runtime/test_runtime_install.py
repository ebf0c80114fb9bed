"""The installed result: what the backport changed in vLLM, and that it loads.

Each check runs on both venvs. On the patched one it must hold; on the
pristine one it must not, or the check proves nothing.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from dflash2_backport.vllm_tree import layout
from tests.runtime import env as runtime_env
from tests.wheels import vllm_wheel

pytestmark = pytest.mark.runtime

# The files the edits touch, and the files the backport installs.
TARGET_FILES = set(layout.TARGET_FILES)
NEW_FILES = set(layout.MODULE_FILES)


def module_name(path: str) -> str:
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


IMPORT_SNIPPET = """
import importlib, json, sys
from runtime_guest import attempt, emit

emit({name: {k: v for k, v in attempt(lambda: importlib.import_module(name)).items()
             if k != "value"}
      for name in json.loads(sys.argv[1])})
"""


@pytest.fixture(params=runtime_env.VLLM_VERSIONS, scope="module")
def version(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def pair(versioned_venvs, version) -> dict:
    """The pristine and patched venv directories of one vLLM release."""
    return versioned_venvs(version)


def test_every_patched_module_and_both_new_modules_import(snippets, pair):
    venvs = {name: runtime_env.venv_python(venv) for name, venv in pair.items()}
    modules = sorted(module_name(p) for p in TARGET_FILES | NEW_FILES)
    names = list(venvs)
    # Fresh interpreters: a fork server's would have imported vllm.config,
    # and with it some of these modules, before the snippet asks.
    outcomes = snippets.run_many(
        [(venvs[n], IMPORT_SNIPPET) for n in names], args=[json.dumps(modules)], fresh=True
    )
    results = dict(zip(names, outcomes))

    failed = {m: r["error"] for m, r in results["patched"].items() if not r["ok"]}
    assert not failed, failed

    # Pristine 0.27.1 imports every file the edits touch, so a failure on the
    # patched side is the backport's; it lacks exactly the new modules.
    missing = {m for m, r in results["pristine"].items() if not r["ok"]}
    assert missing == {module_name(p) for p in NEW_FILES}


def wheel_record(version: str) -> dict[str, str]:
    """path -> sha256 (the wheel's urlsafe base64 form) for vLLM's files."""
    wheel = vllm_wheel(version)
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
        rows = csv.reader(io.TextIOWrapper(archive.open(name), encoding="utf-8"))
        return {
            row[0]: row[1].removeprefix("sha256=")
            for row in rows
            if row and row[0].startswith("vllm/") and row[1]
        }


def file_hash(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


def compare_with_wheel(venv, version: str) -> dict[str, set[str]]:
    site = runtime_env.site_packages(venv.resolve())
    record = wheel_record(version)
    installed = {
        str(p.relative_to(site))
        for p in (site / "vllm").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    return {
        "changed": {p for p in record.keys() & installed if file_hash(site / p) != record[p]},
        "missing": record.keys() - installed,
        "added": installed - record.keys(),
    }


@pytest.fixture(scope="module")
def wheel_comparison(pair, version):
    return {name: compare_with_wheel(venv, version) for name, venv in pair.items()}


def backport_footprint_violations(seen: dict[str, set[str]]) -> list[str]:
    problems = []
    if seen["changed"] != TARGET_FILES:
        problems.append(
            f"changed files: unexpected {sorted(seen['changed'] - TARGET_FILES)}, "
            f"untouched targets {sorted(TARGET_FILES - seen['changed'])}"
        )
    if seen["added"] != NEW_FILES:
        problems.append(
            f"added files: unexpected {sorted(seen['added'] - NEW_FILES)}, "
            f"not installed {sorted(NEW_FILES - seen['added'])}"
        )
    if seen["missing"]:
        problems.append(f"removed files: {sorted(seen['missing'])}")
    return problems


def test_vllm_differs_from_the_wheel_only_in_the_target_files_and_the_new_modules(
    wheel_comparison,
):
    assert backport_footprint_violations(wheel_comparison["patched"]) == []

    pristine = wheel_comparison["pristine"]
    assert pristine == {"changed": set(), "missing": set(), "added": set()}
    assert backport_footprint_violations(pristine) != []


def test_check_command_finds_nothing_left_to_do_after_apply(pair, tmp_path):
    """`check` on what `apply` produced (exit 0), and on a vLLM that still
    needs it (exit 1, pending)."""
    patched_venv, pristine_venv = pair["patched"], pair["pristine"]
    cli = [runtime_env.venv_python(patched_venv), patched_venv / "bin" / "dflash2-backport"]
    environ = {**os.environ, "DFLASH2_BACKPORT_VERDICT_CACHE": str(tmp_path)}
    patched = subprocess.run([*cli, "check"], capture_output=True, text=True, env=environ)
    assert patched.returncode == 0, patched.stdout + patched.stderr

    pristine_site = runtime_env.site_packages(pristine_venv.resolve())
    pristine = subprocess.run(
        [*cli, "check", "--site-packages", str(pristine_site)],
        capture_output=True, text=True, env=environ,
    )
    assert pristine.returncode == 1, pristine.stdout + pristine.stderr


def test_check_through_python_from_the_tools_own_venv(pair, version, tmp_path):
    """The tool in one venv, vLLM in another: --python names the latter."""
    tool = Path(sys.executable).with_name("dflash2-backport")
    environ = {**os.environ, "DFLASH2_BACKPORT_VERDICT_CACHE": str(tmp_path)}
    for name, expected in (("pristine", 1), ("patched", 0)):
        python = runtime_env.venv_python(pair[name])
        done = subprocess.run([tool, "check", "--python", python, "--json"],
                              capture_output=True, text=True, env=environ)
        assert done.returncode == expected, done.stdout + done.stderr
        document = json.loads(done.stdout)
        assert document["vllm_version"] == version
        assert Path(document["target"]) == runtime_env.site_packages(pair[name].resolve())
