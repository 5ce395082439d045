"""Headless Chromium for the dashboard tests: Debian's browser, driven by Playwright.

``make test`` installs Debian's ``chromium`` package when it is missing (``.ci/ensure-chromium``);
Playwright's own browser download is never used. Screenshots go to ``.artifacts/`` and their
paths are printed at the end of the run.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

SCREENSHOTS = Path(__file__).resolve().parent.parent / ".artifacts"
SCREENSHOT_PATHS = pytest.StashKey[list[str]]()
#: The flags a root process in a closed network needs (no sandbox, no background fetches).
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    found = os.environ.get("PARTARCHIVE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.fail("no Chromium: `make test` installs Debian's chromium package (.ci/ensure-chromium)")
    return found


def screenshot_path(config: pytest.Config, name: str) -> Path:
    """Where to save a screenshot; its path is printed at the end of the run."""
    SCREENSHOTS.mkdir(exist_ok=True)
    path = SCREENSHOTS / name
    config.stash.setdefault(SCREENSHOT_PATHS, []).append(str(path))
    return path


def print_screenshots(config: pytest.Config, write_line: object) -> None:
    for path in config.stash.get(SCREENSHOT_PATHS, []):
        write_line(f"screenshot: {path}")  # type: ignore[operator]
