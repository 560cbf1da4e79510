"""The error types, kept importable here for compatibility: they live in :mod:`fastuq.errors`."""

from fastuq.errors import RecordError, TooManySkipped

__all__ = ["RecordError", "TooManySkipped"]
