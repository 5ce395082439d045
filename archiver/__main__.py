from archiver.cli import entry_point

entry_point()
