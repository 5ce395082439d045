"""The README's command table is held to the command line: every subcommand (and every action of
one, such as ``stats verify``) has a row, and every flag a subcommand takes is named in one of its
rows, or, for a flag every command shares, in the configuration table."""

from __future__ import annotations

import argparse
import re

from archiver.cli.args import build_parser
from tests.test_config_table import ROOT, _names, _table

Command = tuple[str, ...]


def _command_rows() -> list[str]:
    """The first cell of each row of the command table."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Command line") :]
    section = section[: section.index("\n## ", 1)]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]
    return [re.split(r"(?<!\\)\|", row)[1].strip().replace("\\|", "|") for row in rows]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def _commands(parser: argparse.ArgumentParser, path: Command = ()) -> dict[Command, set[str]]:
    """Every command path (``("dead-letters", "list")``, ``("stats", "verify")``) with its flags."""
    out: dict[Command, set[str]] = {}
    for name, sub in _subparsers(parser).items():
        here = (*path, name)
        nested = _commands(sub, here)
        if nested:
            out.update(nested)
            continue
        flags = {f for a in sub._actions for f in a.option_strings if f not in ("-h", "--help")}
        out[here] = flags
        for a in sub._actions:  # a positional with choices names actions: `stats verify`
            if not a.option_strings and a.choices and not isinstance(a, argparse._SubParsersAction):
                out.update({(*here, str(choice)): flags for choice in a.choices})
    return out


def _rows_of(command: Command, rows: list[str]) -> list[str]:
    """The rows for a command: those starting with ``partarchive <first word>`` that name the rest."""
    head = f"`partarchive {command[0]}"
    return [
        row
        for row in rows
        if row.startswith((head + " ", head + "`"))
        and all(re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", row) for word in command[1:])
    ]


def test_every_subcommand_has_a_row() -> None:
    rows, commands = _command_rows(), _commands(build_parser())
    assert len(commands) >= 15  # the walk finds the commands (run, stats verify, dead-letters list, ...)
    missing = [" ".join(c) for c in commands if not _rows_of(c, rows)]
    assert missing == [], "subcommands the README's command table leaves out"


def test_every_flag_of_a_subcommand_is_named_in_its_rows_or_the_configuration_table() -> None:
    rows = _command_rows()
    configured = {name.split()[0] for row in _table() for name in _names(row[0])}
    missing = []
    for command, flags in _commands(build_parser()).items():
        text = " ".join(_rows_of(command, rows) + _rows_of(command[:1], rows))  # `stats verify` shares `stats`'s
        named = set(re.findall(r"--[a-z][a-z-]*", text))
        missing += [f"{' '.join(command)} {flag}" for flag in sorted(flags - named - configured)]
    assert missing == [], "flags the README leaves out"
