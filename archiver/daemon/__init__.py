"""The archiver daemon: its loop, the pacing of maintenance, several namespaces or processes, shutdown."""
