"""Telling a log's format from its first file (``fastuq import SRC`` without a format).

Rules (the file's name, then its top-level structure; one JSONL line, or the first record
or entry of a JSON file, is looked at):

* ``*.jsonl`` whose first object has ``Q``, ``R`` and ``P``: ``ford``; one whose first
  object has ``resourceSpans`` (an OTLP trace export): ``otel``;
* ``*.jsonl`` whose first object is a response in the OpenAI shape (``choices`` whose first
  item has ``logprobs``) or Gemini's (``candidates``), or holds one at ``response``:
  ``openai`` (fields other than the defaults need ``fastuq import openai --map``);
* a JSON object with ``resourceSpans``: ``otel``;
* a JSON list whose first item has ``agent_response``: ``agora``; one whose first item has
  ``evaluation`` and ``response``: ``chateval``;
* a JSON list whose first item has ``globalMemory``: ``mallm``;
* a JSON object with ``players``: ``mad``;
* a JSON object whose first value is a list led by a list of histories: ``dylan`` when the
  value has 4 entries (``[agent_contexts, gold, level, subject]``), ``du`` when it has 2
  (``[agent_contexts, gold]``) or is itself the list of histories (Du et al.'s biography
  logs, which ``du`` then refuses with a message that says why).

Anything else, a Parquet file included, is not recognised: ``generic`` needs a mapping
(``--config``). A folder stands for its first file that fits a format (sorted; MAD's
``*-config.json`` prompt files are skipped, and so are files that fit no format, such as
LLM-Agora's ``*_performance.json``, up to :data:`MAX_SNIFFED` files looked at).
"""

from __future__ import annotations

import json
from pathlib import Path

from fastuq.importers.common import expand_paths, load_json
from fastuq.importers.mad import is_mad_config
from fastuq.importers.mallm import is_mallm_record
from fastuq.importers.otel import is_otlp_traces

__all__ = ["DETECTABLE", "detect_each", "detect_format", "sniff_file"]

#: The formats :func:`detect_format` can recognise.
DETECTABLE = ("dylan", "du", "ford", "agora", "chateval", "mad", "mallm", "otel", "openai")


def _first_jsonl_object(path: Path) -> object:
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    try:
                        return json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise ValueError(f"{path}: malformed JSON on its first line: "
                                         f"{exc}") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text: {exc}") from exc
    return None


def _is_history(x: object) -> bool:
    return isinstance(x, list) and bool(x) and all(isinstance(m, dict) and "role" in m
                                                   for m in x)


def _is_response(x: object) -> bool:
    """An OpenAI-shape response with log-probabilities asked for, or a Gemini one."""
    if not isinstance(x, dict):
        return False
    choices, cands = x.get("choices"), x.get("candidates")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return "logprobs" in choices[0]
    return isinstance(cands, list) and bool(cands) and isinstance(cands[0], dict) and \
        ("logprobsResult" in cands[0] or "logprobs_result" in cands[0])


def sniff_file(path: Path) -> list[str]:
    """The formats ``path`` looks like (see the module docstring; empty: none)."""
    name = path.name.lower()
    if name.endswith(".jsonl"):
        first = _first_jsonl_object(path)
        if is_otlp_traces(first):
            return ["otel"]
        if not isinstance(first, dict):
            return []
        if {"Q", "R", "P"} <= set(first):
            return ["ford"]
        return ["openai"] if _is_response(first) or _is_response(first.get("response")) \
            else []
    if not name.endswith(".json"):
        return []
    data = load_json(path)
    found = []
    if isinstance(data, list) and data and isinstance(data[0], dict):
        if "agent_response" in data[0]:
            found.append("agora")
        if "evaluation" in data[0] and "response" in data[0]:
            found.append("chateval")
        if is_mallm_record(data[0]):
            found.append("mallm")
    elif isinstance(data, dict) and data:
        if is_otlp_traces(data):
            found.append("otel")
        if "players" in data:
            found.append("mad")
        value = next(iter(data.values()))
        if isinstance(value, list) and value:
            if isinstance(value[0], list) and value[0] and all(map(_is_history, value[0])):
                if len(value) == 4:
                    found.append("dylan")
                elif len(value) == 2:
                    found.append("du")
            elif all(map(_is_history, value)):
                found.append("du")
    return found


#: How many files :func:`detect_format` looks at before giving up.
MAX_SNIFFED = 8


def detect_format(paths) -> tuple[str, Path]:
    """``(format, the file it was told from)`` for the logs in ``paths`` (files or folders,
    expanded to their ``*.json``, ``*.jsonl`` and ``*.parquet`` files, sorted): the format of
    the first file that fits one, files that fit none (a run's ``*_performance.json``, a
    README) being passed over, at most :data:`MAX_SNIFFED` of them.

    Raises:
      ValueError: no file, no file among the first :data:`MAX_SNIFFED` fits a format, or the
        first that fits one fits several (the message lists the formats and says how to name
        one).
      FileNotFoundError: a path does not exist.
    """
    files = expand_paths(paths, (".json", ".jsonl", ".parquet"),
                         keep=lambda p: not is_mad_config(p))
    known = ", ".join(DETECTABLE)
    for path in files[:MAX_SNIFFED]:
        found = sniff_file(path)
        if len(found) == 1:
            return found[0], path
        if found:
            raise ValueError(f"{path}: ambiguous, it fits {' and '.join(found)}; name the "
                             f"format (one of: {known}, generic)")
    looked = files[0] if len(files) == 1 else \
        f"{files[0]} (and {min(len(files), MAX_SNIFFED) - 1} more files)"
    raise ValueError(
        f"{looked}: cannot tell the format (recognised: {known}); name the format, "
        "fastuq import FORMAT SRC..., or map a layout of your own with fastuq import "
        "generic --config map.toml SRC...")


def detect_each(paths) -> tuple[dict[str, list[Path]], list[Path]]:
    """The format of every file of ``paths`` (expanded as :func:`detect_format` does), for
    an import that mixes formats: ``({format: its files, in order}, files passed over)``.
    A file of a folder that fits no format (a ``*_performance.json``, a README) is passed
    over; a file named by itself must fit one.

    Raises:
      ValueError: a file fits several formats, a file named by itself fits none, or no file
        fits any (the message names the file and lists the formats).
      FileNotFoundError: a path does not exist.
    """
    paths = [paths] if isinstance(paths, str | Path) else list(paths)
    named = {Path(p).absolute() for p in paths if Path(p).is_file()}
    files = expand_paths(paths, (".json", ".jsonl", ".parquet"),
                         keep=lambda p: not is_mad_config(p))
    known = ", ".join(DETECTABLE)
    groups: dict[str, list[Path]] = {}
    passed: list[Path] = []
    for path in files:
        found = sniff_file(path)
        if len(found) > 1:
            raise ValueError(f"{path}: ambiguous, it fits {' and '.join(found)}; name the "
                             f"format (one of: {known}, generic)")
        if found:
            groups.setdefault(found[0], []).append(path)
        elif path.absolute() in named:
            raise ValueError(f"{path}: cannot tell the format (recognised: {known}); name "
                             "the format, fastuq import FORMAT SRC..., or map a layout of "
                             "your own with fastuq import generic --config map.toml SRC...")
        else:
            passed.append(path)
    if not groups:
        detect_format(paths)  # raises its message (no file fits a format)
    return groups, passed
