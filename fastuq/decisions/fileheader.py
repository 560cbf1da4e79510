"""The header every fastuq JSON model file starts with, and its one check.

A calibration file (``fastuq calibrate``) and a stack file (``fastuq fit --stack``) both
record ``format`` (what kind of file it is), ``format_version`` (the layout) and
``fastuq_version`` (the fastuq that wrote it). :func:`check_file_header` refuses another
kind of file, another layout or another fastuq major version (:func:`major_version`) with a
message that names the file and says what to do. Imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["check_file_header", "major_version"]


def major_version(version: str) -> str:
    """The part of a fastuq version that must match for a calibration or stack file
    to be used: the
    first number (``"1"`` of ``"1.4.2"``), or the first two for 0.x versions (``"0.1"``
    of ``"0.1.0"``), whose minor releases may change scores."""
    parts = str(version).split(".")
    return ".".join(parts[:2]) if parts[0] == "0" and len(parts) > 1 else parts[0]


def check_file_header(doc: Any, source: str, kind: str, fmt: str, version: int,
                      remedy: str) -> str:
    """Check the header of a fastuq ``kind`` file (``"calibration"``, ``"stack"``) read from
    ``source``; returns the fastuq version that wrote it.

    Args:
      doc: the parsed JSON document.
      source: names the file in errors (a path, or what the document came from).
      kind: the file kind, as the messages say it ("not a fastuq {kind} file").
      fmt: the ``format`` value that kind of file has.
      version: the ``format_version`` (layout) this fastuq reads.
      remedy: the command that writes such a file (``"fastuq calibrate"``), told as the way
        out: "write one with {remedy}", "run {remedy} again".

    Raises:
      ValueError: ``doc`` is not a mapping or its ``format`` is not ``fmt``; its layout is
        not ``version``; or it was made by another fastuq major version than this one
        (scores may differ). Each message starts with ``source``.
    """
    from fastuq import __version__

    if not isinstance(doc, Mapping) or doc.get("format") != fmt:
        raise ValueError(f"{source}: not a fastuq {kind} file (no \"format\": \"{fmt}\"); "
                         f"write one with {remedy}")
    if doc.get("format_version") != version:
        raise ValueError(f"{source}: {kind} file layout {doc.get('format_version')!r}; this "
                         f"fastuq reads layout {version}; run {remedy} again")
    made = str(doc.get("fastuq_version"))
    if major_version(made) != major_version(__version__):
        raise ValueError(f"{source}: made by fastuq {made}, another major version than this "
                         f"fastuq {__version__} (scores may differ); run {remedy} again")
    return made
