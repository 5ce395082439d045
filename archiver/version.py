"""The installed distribution's version (``partarchive --version``, the API's OpenAPI document)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def installed_version() -> str:
    try:
        return version("partarchive")
    except PackageNotFoundError:
        return "unknown (not installed)"
