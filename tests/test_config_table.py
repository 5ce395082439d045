"""The README's configuration table is held to the code: every setting the code reads (each `Config`
field, as ``PARTARCHIVE_<FIELD>``, and every variable read from the environment anywhere in the
packages) has a row; every row names a variable or flag that exists; a number in the default column
is the code's default."""

from __future__ import annotations

import re
from dataclasses import MISSING, fields
from pathlib import Path

from archiver.cli.args import build_parser
from archiver.config import Config

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("codec", "layers", "stats", "archiver")
ENV_READ = re.compile(r"""(?:environ\.get|environ\[|getenv)\(?\s*["']([A-Z][A-Z0-9_]+)["']""")


def _table() -> list[list[str]]:
    """The configuration table's rows, cells stripped (header and rule left out)."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Configuration") :]
    section = section[: section.index("\n## ", 1)]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def _names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _config_variables() -> dict[str, str]:
    """Environment variable -> Config field, as `Config.from_env` reads them."""
    return {("REDIS_URL" if f.name == "redis_url" else f"PARTARCHIVE_{f.name.upper()}"): f.name for f in fields(Config)}


def _variables_read_in_the_code() -> set[str]:
    found = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            found.update(ENV_READ.findall(path.read_text()))
    return found


def _flags() -> set[str]:
    parser = build_parser()
    flags = {flag for action in parser._actions for flag in action.option_strings}
    for action in parser._subparsers._group_actions:  # type: ignore[union-attr]
        for sub in action.choices.values():  # type: ignore[union-attr]
            flags.update(flag for a in sub._actions for flag in a.option_strings)
    return flags


def test_every_setting_the_code_reads_has_a_row() -> None:
    in_table = {name for row in _table() for name in _names(row[1])}
    wanted = set(_config_variables()) | _variables_read_in_the_code()
    assert wanted - in_table == set(), "settings the README's configuration table leaves out"
    assert len(_variables_read_in_the_code()) >= 2  # the scan finds what it looks for (REDIS_URL is read by name)


def test_every_row_names_a_real_setting_with_its_default() -> None:
    variables, read, flags = _config_variables(), _variables_read_in_the_code(), _flags()
    defaults = {f.name: f.default for f in fields(Config) if f.default is not MISSING}
    rows = _table()
    assert len(rows) >= len(variables)
    for flag_cell, env_cell, default_cell, _meaning in rows:
        names = _names(env_cell)
        assert len(names) <= 1 and (names or _names(flag_cell)), flag_cell
        for name in names:
            assert name in variables or name in read, f"{name}: no such setting"
        for flag in _names(flag_cell):
            assert flag.split()[0] in flags, f"{flag}: no such flag"
        number = re.fullmatch(r"([0-9][0-9.]*)", default_cell)
        if names and number and names[0] in variables:
            assert float(number.group(1)) == float(defaults[variables[names[0]]]), f"{names[0]} default"
