"""Wheels cut into parts that travel one per transfer, and put back together
where they arrive, in whatever order the parts come.

Here, build_real_install.py lays the wheels it carries end to end, one
stream per region, and cuts each stream into parts of at most LIMIT bytes:

    PARTS/p01/p01.bin          the part's bytes
    PARTS/p01/manifest.json    the whole bundle's manifest, the same in every part

On the GPU host, after every transfer, run

    python3 scripts/gpu/real_install_parts.py collect --store STORE PARTS/*/

which moves each part that came along into STORE/parts (checked against the
manifest's size and sha256), writes out every wheel whose parts are all there
(STORE/wheels, checked against its own sha256), drops a part once each wheel
it holds is out, and prints what each install still waits for. A part that
is already in the store, or was consumed, is left as it is. Nothing but the
standard library is used, so the device's own python3 runs it; `packaging`,
where the interpreter has it, says whether a package the machine already has
satisfies what the install asks of it (without it, every wheel is needed).

    python3 scripts/gpu/real_install_parts.py status --store STORE [--json]
    python3 scripts/gpu/real_install_parts.py ready --store STORE --install NAME
    python3 scripts/gpu/real_install_parts.py links --store STORE --install NAME

`ready` exits 0 when every wheel NAME needs is out; `links` fills
STORE/links/NAME with links to the wheels of NAME's closure that are out, the
folder that install's pip gets as --find-links.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

MANIFEST = "manifest.json"
# Kinds of wheel: "carried" wheels are always needed; "machine" wheels are of
# packages the GPU host's image has (needed unless its version satisfies
# every requirement on it); "assumed" wheels are of packages the image has at
# the very version the install pins (needed only if it does not after all).
ALWAYS = {"carried"}


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        for chunk in iter(lambda: source.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------------------
# Cutting (here)
# ---------------------------------------------------------------------------

def piece_sizes(total: int, limit: int) -> list[int]:
    """How a stream of `total` bytes is cut: parts of `limit`, the last
    holding the rest."""
    if limit <= 0:
        raise ValueError("a part must be able to hold at least one byte")
    sizes = []
    while total > 0:
        sizes.append(min(total, limit))
        total -= sizes[-1]
    return sizes


def rebalance(wheels: list[dict], regions: list[str], sizes: dict[str, int],
              limit: int) -> list[dict]:
    """Save a transfer: where a region's stream would end in a last part of a
    few bytes, move its smallest wheels to the end of the region before it,
    when they fit in the room that region's last part has left. `sizes` maps
    each wheel's path to its size. Returns the wheels, in region order (a
    moved wheel after those it joined), their regions changed."""
    wheels = [dict(w) for w in wheels]
    for before, region in zip(regions, regions[1:]):
        total = {r: sum(sizes[w["path"]] for w in wheels if w["region"] == r)
                 for r in (before, region)}
        if not total[before] or not total[region]:
            continue
        overflow = total[region] - (len(piece_sizes(total[region], limit)) - 1) * limit
        room = len(piece_sizes(total[before], limit)) * limit - total[before]
        if overflow == total[region]:  # one part in all: nothing to save
            continue
        chosen, moved = [], 0
        for wheel in sorted((w for w in wheels if w["region"] == region),
                            key=lambda w: sizes[w["path"]]):
            if moved >= overflow:
                break
            chosen.append(wheel)
            moved += sizes[wheel["path"]]
        if moved < overflow or moved > room:
            continue
        rest = [w for w in wheels if w not in chosen]
        at = max(i for i, w in enumerate(rest) if w["region"] == before) + 1
        for wheel in chosen:
            wheel["region"] = before
        wheels = rest[:at] + chosen + rest[at:]
    return wheels


def cut(wheels: list[dict], regions: list[str], out: Path, limit: int,
        installs: dict, first_number: int = 1) -> dict:
    """Lay `wheels` (each: path, region, kind, project, version) end to end,
    one stream per region in `regions`' order (the wheels in their given
    order), and cut each stream into parts of at most `limit` bytes under
    `out`. Returns the manifest, also written into each part."""
    entries, parts = [], []
    number = first_number
    for region in regions:
        members = [w for w in wheels if w["region"] == region]
        offset = 0
        for wheel in members:
            path = Path(wheel["path"])
            size = path.stat().st_size
            entries.append({"file": path.name, "region": region, "offset": offset,
                            "bytes": size, "sha256": sha256_of(path),
                            "kind": wheel["kind"], "project": wheel["project"],
                            "version": wheel["version"]})
            offset += size
        start = 0
        for size in piece_sizes(offset, limit):
            name = f"p{number:02d}"
            parts.append({"name": name, "region": region, "offset": start, "bytes": size})
            start += size
            number += 1
    manifest = {"limit": limit, "regions": regions, "parts": parts, "wheels": entries,
                "installs": installs}
    manifest["build"] = hashlib.sha256(json.dumps(
        {"parts": parts, "wheels": entries, "installs": installs},
        sort_keys=True).encode()).hexdigest()[:16]
    by_region = {}
    for wheel in wheels:
        by_region.setdefault(wheel["region"], []).append(Path(wheel["path"]))
    if out.exists():
        shutil.rmtree(out)
    for part in parts:
        directory = out / part["name"]
        directory.mkdir(parents=True)
        with open(directory / f"{part['name']}.bin", "wb") as sink:
            _copy_range(by_region[part["region"]], part["offset"], part["bytes"], sink)
        part["sha256"] = sha256_of(directory / f"{part['name']}.bin")
    text = json.dumps(manifest, indent=1, sort_keys=True)
    for part in parts:
        (out / part["name"] / MANIFEST).write_text(text)
    (out / MANIFEST).write_text(text)
    return manifest


def _copy_range(paths: list[Path], offset: int, size: int, sink) -> None:
    """Bytes [offset, offset + size) of the files `paths` laid end to end."""
    position = 0
    for path in paths:
        length = path.stat().st_size
        if position + length <= offset:
            position += length
            continue
        with open(path, "rb") as source:
            source.seek(max(0, offset - position))
            while size > 0:
                chunk = source.read(min(size, 1 << 22))
                if not chunk:
                    break
                sink.write(chunk)
                size -= len(chunk)
        position += length
        if size == 0:
            return
    if size:
        raise ValueError("the stream ends before the part does")


# ---------------------------------------------------------------------------
# Collecting (on the device)
# ---------------------------------------------------------------------------

def parts_of(manifest: dict, wheel: dict) -> list[dict]:
    """The parts that hold some of a wheel's bytes."""
    end = wheel["offset"] + wheel["bytes"]
    return [p for p in manifest["parts"] if p["region"] == wheel["region"]
            and p["offset"] < end and p["offset"] + p["bytes"] > wheel["offset"]]


class Store:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.parts = self.root / "parts"
        self.wheels = self.root / "wheels"
        self.consumed_path = self.root / "consumed.txt"

    @property
    def manifest(self) -> dict | None:
        path = self.root / MANIFEST
        return json.loads(path.read_text()) if path.is_file() else None

    def consumed(self) -> set[str]:
        if not self.consumed_path.is_file():
            return set()
        return set(self.consumed_path.read_text().split())

    def has_part(self, name: str) -> bool:
        return name in self.consumed() or (self.parts / f"{name}.bin").is_file()

    def wheel_out(self, wheel: dict) -> bool:
        path = self.wheels / wheel["file"]
        return path.is_file() and path.stat().st_size == wheel["bytes"]

    def adopt(self, source: Path) -> str:
        """Take in one carried part folder; say what happened to it."""
        incoming = json.loads((source / MANIFEST).read_text())
        current = self.manifest
        if current is None:
            self.root.mkdir(parents=True, exist_ok=True)
            for name in ("parts", "wheels"):
                (self.root / name).mkdir(exist_ok=True)
            (self.root / MANIFEST).write_text(json.dumps(incoming, indent=1, sort_keys=True))
            current = incoming
        elif current["build"] != incoming["build"]:
            raise SystemExit(f"{source}: part of build {incoming['build']}, but the store "
                             f"{self.root} holds build {current['build']}; empty it first")
        name = source.name
        listed = {p["name"]: p for p in current["parts"]}
        if name not in listed:
            raise SystemExit(f"{source}: no part {name} in the manifest")
        if self.has_part(name):
            return f"{name}: already here"
        data = source / f"{name}.bin"
        if not data.is_file():
            return f"{name}: no data in {source} (only the manifest came)"
        part = listed[name]
        if data.stat().st_size != part["bytes"] or sha256_of(data) != part["sha256"]:
            raise SystemExit(f"{data}: not the part the manifest lists (size or sha256)")
        self.parts.mkdir(parents=True, exist_ok=True)
        target = self.parts / f"{name}.bin"
        shutil.move(str(data), str(target.with_suffix(".partial")))
        os.replace(target.with_suffix(".partial"), target)
        return f"{name}: collected ({part['bytes']} bytes)"

    def extract(self) -> list[str]:
        """Write out every wheel whose parts are all here; drop each part
        whose wheels are all out. Returns the wheels written."""
        manifest = self.manifest
        if manifest is None:
            return []
        written = []
        for wheel in manifest["wheels"]:
            if self.wheel_out(wheel):
                continue
            holders = parts_of(manifest, wheel)
            if not all((self.parts / f"{p['name']}.bin").is_file() for p in holders):
                continue
            target = self.wheels / wheel["file"]
            partial = target.with_name(target.name + ".partial")
            self.wheels.mkdir(parents=True, exist_ok=True)
            with open(partial, "wb") as sink:
                for part in holders:
                    start = max(wheel["offset"], part["offset"])
                    end = min(wheel["offset"] + wheel["bytes"], part["offset"] + part["bytes"])
                    with open(self.parts / f"{part['name']}.bin", "rb") as source:
                        source.seek(start - part["offset"])
                        left = end - start
                        while left:
                            chunk = source.read(min(left, 1 << 22))
                            if not chunk:
                                raise SystemExit(f"part {part['name']} ends early")
                            sink.write(chunk)
                            left -= len(chunk)
            if sha256_of(partial) != wheel["sha256"]:
                partial.unlink()
                raise SystemExit(f"{wheel['file']}: its parts do not give the wheel that was cut")
            os.replace(partial, target)
            written.append(wheel["file"])
        self._drop_spent(manifest)
        return written

    def _drop_spent(self, manifest: dict) -> None:
        consumed = self.consumed()
        for part in manifest["parts"]:
            path = self.parts / f"{part['name']}.bin"
            if not path.is_file():
                continue
            end = part["offset"] + part["bytes"]
            held = [w for w in manifest["wheels"] if w["region"] == part["region"]
                    and w["offset"] < end and w["offset"] + w["bytes"] > part["offset"]]
            if all(self.wheel_out(w) for w in held):
                consumed.add(part["name"])
                self.consumed_path.write_text("".join(f"{n}\n" for n in sorted(consumed)))
                path.unlink()

    # -- what an install needs ------------------------------------------------

    def needed(self, install: str, versions: dict[str, str] | None = None) -> list[dict]:
        """The wheels `install` needs: every carried one, and each of the
        others whose package the machine lacks or has at a version that
        does not satisfy the install's requirements on it."""
        manifest = self.manifest
        spec = manifest["installs"][install]
        versions = installed_versions() if versions is None else versions
        by_file = {w["file"]: w for w in manifest["wheels"]}
        needed = []
        for name in spec["wheels"]:
            wheel = by_file[name]
            if wheel["kind"] in ALWAYS:
                needed.append(wheel)
                continue
            have = versions.get(normalize(wheel["project"]))
            if have is None or not satisfies(have, spec["requirements"].get(
                    normalize(wheel["project"]), "")):
                needed.append(wheel)
        return needed

    def missing(self, install: str, versions: dict[str, str] | None = None) -> dict:
        manifest = self.manifest
        wheels = [w for w in self.needed(install, versions) if not self.wheel_out(w)]
        parts = sorted({p["name"] for w in wheels for p in parts_of(manifest, w)
                        if not (self.parts / f"{p['name']}.bin").is_file()})
        return {"wheels": [w["file"] for w in wheels], "parts": parts}

    def link(self, install: str) -> Path:
        """STORE/links/INSTALL: a link to each wheel of the install's closure
        that is out, and nothing else (pip gets it as --find-links)."""
        manifest = self.manifest
        folder = self.root / "links" / install
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        by_file = {w["file"]: w for w in manifest["wheels"]}
        for name in manifest["installs"][install]["wheels"]:
            if self.wheel_out(by_file[name]):
                os.symlink(self.wheels / name, folder / name)
        return folder


def normalize(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def installed_versions() -> dict[str, str]:
    """The packages this interpreter sees, by normalized name."""
    from importlib import metadata

    found = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and normalize(name) not in found:
            found[normalize(name)] = dist.version
    return found


def satisfies(version: str, specifier: str) -> bool:
    """Whether `version` meets `specifier` ('' meets anything); without
    `packaging`, nothing but an exact '==' pin is judged, as not met."""
    if not specifier:
        return True
    try:
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version
    except ImportError:
        return specifier == f"=={version}"
    try:
        return SpecifierSet(specifier).contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


def summary(store: Store, versions: dict[str, str] | None = None) -> dict:
    manifest = store.manifest
    if manifest is None:
        return {"build": None}
    versions = installed_versions() if versions is None else versions
    every = [p["name"] for p in manifest["parts"]]
    here = [n for n in every if store.has_part(n)]
    return {
        "build": manifest["build"],
        "parts_here": len(here), "parts_total": len(every),
        "parts_not_here": [n for n in every if n not in here],
        "wheels_out": sum(store.wheel_out(w) for w in manifest["wheels"]),
        "installs": {name: store.missing(name, versions) for name in manifest["installs"]},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    collect = sub.add_parser("collect", help="take in carried parts, write out wheels")
    collect.add_argument("--store", type=Path, required=True)
    collect.add_argument("sources", nargs="*", type=Path)
    for name in ("status", "ready", "links", "specs", "versions"):
        command = sub.add_parser(name)
        command.add_argument("--store", type=Path, required=True)
        if name not in ("status", "versions"):
            command.add_argument("--install", required=True)
        command.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    store = Store(args.store)
    if args.command == "versions":
        # The vLLM releases this build installs, in its order (the first is
        # the one the tool patches); none before a part is here.
        manifest = store.manifest or {"regions": [], "installs": {}}
        for region in manifest["regions"]:
            if f"vllm-{region}" in manifest["installs"]:
                print(region)
        return 0
    if args.command == "collect":
        for source in args.sources:
            if (source / MANIFEST).is_file():
                print(store.adopt(source), flush=True)
        for name in store.extract():
            print("wheel out:", name, flush=True)
        args.json = False
    if args.command in ("collect", "status"):
        state = summary(store)
        if args.json:
            print(json.dumps(state))
        elif state["build"] is None:
            print("no part here yet")
        else:
            print(f"build {state['build']}: {state['parts_here']}/{state['parts_total']} "
                  f"parts here, {state['wheels_out']} wheels out")
            for name, missing in state["installs"].items():
                if missing["wheels"]:
                    print(f"  {name}: waits for {len(missing['wheels'])} wheels, "
                          f"parts {' '.join(missing['parts']) or '(here, not yet cut out)'}")
                else:
                    print(f"  {name}: every wheel it needs is here")
        return 0
    if store.manifest is None:
        print("no part here yet", file=sys.stderr)
        return 1
    if args.install not in store.manifest["installs"]:
        print(f"no install {args.install} in this build", file=sys.stderr)
        return 1
    if args.command == "ready":
        missing = store.missing(args.install)
        if args.json:
            print(json.dumps(missing))
        return 0 if not missing["wheels"] else 1
    if args.command == "specs":
        # What the install asks pip for, one requirement a line (torch first).
        print("\n".join(store.manifest["installs"][args.install]["specs"]))
        return 0
    print(store.link(args.install))
    return 0


if __name__ == "__main__":
    sys.exit(main())
