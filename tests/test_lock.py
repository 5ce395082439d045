"""The lock files hold what ``make install`` installs: every requirement of pyproject.toml (the
``dev`` extra and everything it pulls in, and the build requirement) pinned to one version that
its range allows, every pin with hashes, and nothing pinned twice."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^ ;\\]+)")

pytestmark = pytest.mark.packaging


def _pins(path: Path) -> dict[str, tuple[Version, int]]:
    """Package -> (pinned version, number of hashes) of a ``uv pip compile --generate-hashes`` file."""
    pins: dict[str, tuple[Version, int]] = {}
    current = ""
    for line in path.read_text().splitlines():
        if match := PIN.match(line):
            current = canonicalize_name(match.group(1))
            assert current not in pins, f"{current} pinned twice in {path.name}"
            pins[current] = (Version(match.group(2)), 0)
        elif line.strip().startswith("--hash=sha256:") and current:
            version, hashes = pins[current]
            pins[current] = (version, hashes + 1)
    return pins


def _requirements() -> list[Requirement]:
    """pyproject.toml's requirements for the dev extra, self-references expanded, markers applied."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    wanted, seen, out = ["dev"], set(), [Requirement(r) for r in project["project"]["dependencies"]]
    while wanted:
        extra = wanted.pop()
        seen.add(extra)
        for raw in extras[extra]:
            req = Requirement(raw)
            if canonicalize_name(req.name) == "partarchive":
                wanted += [e for e in req.extras if e not in seen]
            else:
                out.append(req)
    out += [Requirement(r) for r in project["build-system"]["requires"]]
    return [r for r in out if r.marker is None or r.marker.evaluate()]


def test_every_requirement_is_pinned_within_its_range_with_hashes() -> None:
    pins = _pins(ROOT / "requirements" / "dev.lock")
    assert len(pins) > 30  # the whole tree, not only the direct requirements
    for req in _requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} is not in requirements/dev.lock: run make lock"
        version, _ = pins[name]
        assert req.specifier.contains(version, prereleases=True), f"{name} {version} is outside {req}: run make lock"
    unhashed = [name for name, (_, hashes) in pins.items() if hashes == 0]
    assert not unhashed, unhashed


def test_the_installer_is_pinned_with_hashes_and_make_install_uses_the_locks() -> None:
    pins = _pins(ROOT / "requirements" / "bootstrap.lock")
    assert set(pins) == {"uv"} and pins["uv"][1] > 0
    makefile = (ROOT / "Makefile").read_text()
    assert "--require-hashes -r requirements/bootstrap.lock" in makefile
    assert "sync --quiet --python $(BIN)/python --require-hashes requirements/bootstrap.lock requirements/dev.lock" in (
        makefile
    )
    assert "--no-deps --no-build-isolation -e ." in makefile
