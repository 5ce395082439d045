"""The ``partarchive`` command line: `main` dispatches to one module per command."""

from archiver.cli.main import entry_point, main

__all__ = ["entry_point", "main"]
