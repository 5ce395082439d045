"""The exception hierarchy shared by every package (codec is the bottom of the import graph)."""


class PartArchiveError(Exception):
    """Base class of every error partarchive raises on purpose."""


class ValidationError(PartArchiveError, ValueError):
    """A value given by a caller is malformed, out of range or hostile."""


class DecodeError(PartArchiveError, ValueError):
    """Stored bytes are not a valid encoding (truncated, corrupted, unknown format)."""
