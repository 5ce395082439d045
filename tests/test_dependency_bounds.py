"""The redis-py the package allows is the redis-py the suite runs on: `archiver.engine.sentinel`
overrides private methods of its connection (``_connect_retry``, ``connect_check_health``), which
another minor release may rename or change. So the lowest version ``pyproject.toml`` allows is the
minor release the lock installs, and the next major release is not allowed until tested."""

from __future__ import annotations

import tomllib
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def _requirement(name: str) -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [found] = [r for r in map(Requirement, project["dependencies"]) if r.name == name]
    return found


def test_the_lowest_redis_py_allowed_is_the_one_the_suite_runs_on() -> None:
    allowed = _requirement("redis").specifier
    installed = Version(version("redis"))
    lowest = [Version(s.version) for s in allowed if s.operator == ">="]
    assert lowest and lowest[0].release[:2] == installed.release[:2], (
        f"pyproject.toml allows redis {allowed}, the suite runs on {installed}: raise the lower bound to what is tested"
    )
    assert installed in allowed
    assert Version(f"{installed.major + 1}.0") not in allowed  # the next major release waits for a run of the suite


def test_the_private_methods_sentinel_overrides_exist_in_this_redis_py() -> None:
    """What `FollowingConnection` overrides is there to override, with the arguments it passes."""
    import inspect

    from redis.sentinel import SentinelManagedConnection

    from archiver.engine.sentinel import FollowingConnection

    for name in ("connect_check_health", "_connect_retry"):
        assert name in vars(FollowingConnection)
        theirs = getattr(SentinelManagedConnection, name)
        assert (
            inspect.signature(theirs).parameters.keys()
            == inspect.signature(vars(FollowingConnection)[name]).parameters.keys()
        )
