"""How env.py publishes a venv: never half-built, built once under contention,
rebuilt when what it is keyed on changes. Uses stand-in builds, not pip."""

from __future__ import annotations

import threading
import time

import pytest

from tests.runtime import env as runtime_env

pytestmark = pytest.mark.runtime


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setattr(runtime_env, "ROOT", tmp_path)
    monkeypatch.setattr(runtime_env, "_HELD", {})
    yield tmp_path
    for handle in runtime_env._HELD.values():
        handle.close()


def test_a_build_that_fails_half_way_leaves_nothing_that_looks_built(root):
    def broken(target, log):
        target.mkdir()
        (target / "half").write_text("x")
        raise runtime_env.EnvBuildError("pip died")

    with pytest.raises(runtime_env.EnvBuildError):
        runtime_env._publish("demo-key", broken)
    assert not (root / "demo-key").exists()
    assert not list(root.glob("demo-key.*/half"))

    built = runtime_env._publish("demo-key", lambda target, log: target.mkdir())
    assert built == root / "demo-key"
    assert (built / ".complete").exists()


def test_a_leftover_unfinished_build_is_removed_not_reused(root):
    leftover = root / "demo-key.deadbeef"
    leftover.mkdir()
    (leftover / "half").write_text("x")

    built = runtime_env._publish("demo-key", lambda target, log: target.mkdir())
    assert built.resolve() != leftover.resolve()
    assert not leftover.exists()


def test_concurrent_requests_build_once(root):
    builds = []

    def slow(target, log):
        builds.append(target)
        time.sleep(0.3)
        target.mkdir()

    results = []
    threads = [
        threading.Thread(target=lambda: results.append(runtime_env._publish("demo-key", slow)))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1
    assert {r.resolve() for r in results} == {builds[0].resolve()}


def test_patched_venv_key_follows_the_project_sources(tmp_path):
    for name in runtime_env.PROJECT_INPUTS:
        path = tmp_path / name
        if "." in name:
            path.write_text("[project]\n")
        else:
            path.mkdir()
            (path / "a.py").write_text("x = 1\n")
    before = runtime_env.project_key(tmp_path)

    (tmp_path / "modules" / "__pycache__").mkdir()
    (tmp_path / "modules" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert runtime_env.project_key(tmp_path) == before

    (tmp_path / "transforms" / "a.py").write_text("x = 2\n")
    assert runtime_env.project_key(tmp_path) != before


def test_old_builds_of_a_kind_are_pruned_unless_a_process_uses_them(root, monkeypatch):
    monkeypatch.setattr(runtime_env, "KEEP_PER_KIND", 1)
    first = runtime_env._publish("demo-one", lambda target, log: target.mkdir())
    first_dir = first.resolve()
    (root / "modelinfos" / first_dir.name).mkdir(parents=True)
    time.sleep(0.01)
    runtime_env._publish("demo-two", lambda target, log: target.mkdir())
    # This process still holds the first build, so it survives.
    assert first_dir.exists()

    runtime_env._HELD.pop(first_dir).close()
    time.sleep(0.01)
    third = runtime_env._publish("demo-three", lambda target, log: target.mkdir())
    assert third.exists()
    assert not first_dir.exists()
    assert not first.is_symlink()
    # The model-info cache the snippet runner kept for it goes with it.
    assert not (root / "modelinfos" / first_dir.name).exists()
    assert (root / "modelinfos").is_dir()
