"""The package's error types, in a base module that io/, signals/, engine/ and the CLI all use
(it imports nothing of the package): a bad record (:class:`RecordError`, a ValueError that also
says which row of its chunk) and a run that skipped too much (:class:`TooManySkipped`)."""

from __future__ import annotations

__all__ = ["PackError", "PackWarning", "RecordError", "TooManySkipped"]


class RecordError(ValueError):
    """A malformed or out-of-range record.

    ``row`` is the record's index within the chunk (table or batch) being checked, so that a
    caller that asked to skip bad records can drop it and go on; the message names the
    source, row, trajectory and field for people.
    """

    def __init__(self, message: str, row: int | None = None) -> None:
        super().__init__(message)
        self.row = row


class TooManySkipped(ValueError):
    """A run with ``on_error="skip"`` that skipped every record, or more than the fraction
    allowed: the skip list is written, the scores file is not."""


class PackError(ValueError):
    """A packed corpus (``fastuq pack``) refused: its manifest does not match its files, its
    source changed since it was packed, or another pack schema version wrote it. The message
    says which, and how to re-pack."""


class PackWarning(UserWarning):
    """A pack (``fastuq pack``) read while a file it was packed from, still at the path the
    manifest recorded, has another size or modification time than when it was packed: the
    pack holds the corpus as it was then. Given the source (``--source CORPUS``,
    ``Pack(path, source=...)``), a changed source is refused instead (:class:`PackError`)."""
