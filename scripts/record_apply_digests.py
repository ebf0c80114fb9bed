"""Record what `apply` writes on the pristine vLLM trees, as SHA-256 digests.

For each supported release and each edit set (`apply`, `apply --only-pr`),
applies on a fresh copy of the real tree (tests.trees.make_site) and records
the digest of every file the run created or changed, by path relative to the
site-packages. The vLLM files themselves are never committed; the digests
are, and tests/integration/test_recorded_bytes.py holds every later version
of the tool to them.

    DFLASH2_BACKPORT_TEST_CACHE=... .venv/bin/python scripts/record_apply_digests.py

Run it on the commit whose output is to be recorded; it rewrites
tests/data/apply_digests.json.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

from tests.integration import run  # noqa: E402
from tests.trees import make_site, snapshot  # noqa: E402

RELEASES = ("0.26.0", "0.27.0", "0.27.1")
EDIT_SETS = {"all": ("apply",), "pr": ("apply", "--only-pr")}
RECORD = REPOSITORY / "tests" / "data" / "apply_digests.json"


def written(version: str, command: tuple[str, ...]) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as scratch:
        site = make_site(version, Path(scratch) / "site")
        before = snapshot(site)
        code, output = run(*command, "--site-packages", str(site))
        if code != 0:
            raise SystemExit(f"{version} {' '.join(command)}: exit {code}\n{output}")
        after = snapshot(site)
    return {
        path: hashlib.sha256(data).hexdigest()
        for path, data in sorted(after.items())
        if before.get(path) != data
    }


def main() -> None:
    record = {
        version: {name: written(version, command) for name, command in EDIT_SETS.items()}
        for version in RELEASES
    }
    RECORD.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"{RECORD.relative_to(REPOSITORY)}: {sum(len(s) for v in record.values() for s in v.values())} digests")


if __name__ == "__main__":
    main()
