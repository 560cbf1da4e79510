"""A calibrated gate as one object and one file: calibrate once, apply anywhere.

:class:`Gate` holds the settings of :func:`fastuq.decisions.threshold.calibrate_threshold`
(alpha, delta, direction, procedure, levels, starts), the score column it gates on and the
estimator (with its parameters) that computes that column, in scikit-learn's manner:
``Gate(...).calibrate(scores, correct)`` then ``.apply(new_scores)``. With ``groups`` (e.g.
each trajectory's protocol) it calibrates one threshold per group, each with its own
guarantee, and applies each group's threshold to that group's items.

``gate.save(path)`` writes it as JSON (``fastuq gate calibrate -o gate.json``; atomic, the
thresholds at full precision: Python's shortest repr round-trips every float64), and
:meth:`Gate.load` reads it back, refusing a file that is not a gate, a newer format, or
fields of the wrong kind with a ``ValueError`` naming the file and the field.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np

from fastuq.decisions.threshold import (
    DEFAULT_LEVELS,
    DEFAULT_PROCEDURE,
    DEFAULT_STARTS,
    GateCalibration,
    calibrate_threshold,
    check_procedure,
)

__all__ = ["GATE_FORMAT", "GATE_FORMAT_VERSION", "Gate"]

#: The ``format`` field of a gate file, and the newest ``format_version`` this fastuq reads.
GATE_FORMAT = "fastuq-gate"
GATE_FORMAT_VERSION = 1


def _json_number(x: float) -> float | None:
    """A float for JSON: None for NaN and the infinities (strict JSON has neither)."""
    return float(x) if math.isfinite(x) else None


class Gate:
    """A pass/fail gate on a score column: the failure rate among passed items is at most
    ``alpha`` with confidence ``1 - delta`` (per group with ``groups``).

    Args:
      alpha, delta: the guarantee (see :func:`calibrate_threshold`).
      score: the score column it gates on (for the file and the command line; optional in
        Python).
      higher_passes: pass iff ``score >= threshold`` (confidences) instead of ``<=``.
      procedure, levels, starts: the threshold procedure (:func:`calibrate_threshold`).
      estimator: the estimator that computes ``score`` (e.g. ``"sauce"``), so that
        ``fastuq gate apply`` can score data that lacks the column; None when unknown.
      params: that estimator's parameters (name -> value), as given to ``fastuq score``.
      observation_noise: the constant R_t the scores were computed with, or None.

    After :meth:`calibrate`: ``calibrations_`` (group -> :class:`GateCalibration`; the one
    key ``None`` without groups) and ``by_`` (the grouping's name, or None).
    """

    def __init__(self, alpha: float = 0.1, delta: float = 0.05, *, score: str | None = None,
                 higher_passes: bool = False, procedure: str = DEFAULT_PROCEDURE,
                 levels: int | str = DEFAULT_LEVELS, starts: int = DEFAULT_STARTS,
                 estimator: str | None = None, params: dict[str, Any] | None = None,
                 observation_noise: float | None = None) -> None:
        check_procedure(procedure, levels, starts)
        for name, value in (("alpha", alpha), ("delta", delta)):
            if not (isinstance(value, (int, float)) and 0 < value < 1):
                raise ValueError(f"{name} must be a number in (0, 1), got {value!r}")
        self.alpha = float(alpha)
        self.delta = float(delta)
        self.score = score
        self.higher_passes = bool(higher_passes)
        self.procedure = procedure
        self.levels = levels
        self.starts = starts
        self.estimator = estimator
        self.params = dict(params or {})
        self.observation_noise = observation_noise
        self.calibrations_: dict[str | None, GateCalibration] = {}
        self.by_: str | None = None

    def __repr__(self) -> str:
        groups = "" if not self.calibrations_ else f", groups={list(self.calibrations_)}"
        return (f"Gate(alpha={self.alpha}, delta={self.delta}, score={self.score!r}, "
                f"higher_passes={self.higher_passes}, procedure={self.procedure!r}{groups})")

    # ------------------------------------------------------------------ calibrate / apply

    def calibrate(self, scores: Any, correct: Any, *, groups: Any = None,
                  by: str | None = None) -> Gate:
        """Calibrate the threshold(s) on labelled scores; returns ``self``.

        Args:
          scores: 1-D finite scores.
          correct: 1-D labels (bool or 0/1), same length.
          groups: optional 1-D group labels (e.g. protocols), same length: one threshold per
            distinct group, each with its own guarantee at (alpha, delta).
          by: the grouping's name for the file (default ``"group"`` with ``groups``).

        Raises:
          ValueError: as :func:`calibrate_threshold` (the message names the group), or
            ``groups`` of another length or with a missing value.
        """
        s = np.asarray(scores, dtype=np.float64)
        c = np.asarray(correct)
        if s.ndim != 1 or c.ndim != 1 or len(s) != len(c):
            raise ValueError(f"scores and correct must be 1-D of one length, got shapes "
                             f"{s.shape} and {c.shape}")
        kwargs = dict(higher_passes=self.higher_passes, procedure=self.procedure,
                      levels=self.levels, starts=self.starts)
        if groups is None:
            self.calibrations_ = {None: calibrate_threshold(s, c, self.alpha, self.delta,
                                                            **kwargs)}
            self.by_ = None
            return self
        g = _group_labels(groups, len(s))
        out: dict[str | None, GateCalibration] = {}
        for name in sorted(set(g.tolist())):
            keep = g == name
            try:
                out[name] = calibrate_threshold(s[keep], c[keep], self.alpha, self.delta,
                                                **kwargs)
            except ValueError as exc:
                raise ValueError(f"{by or 'group'} {name!r}: {exc}") from None
        self.calibrations_ = out
        self.by_ = by or "group"
        return self

    def apply(self, scores: Any, *, groups: Any = None, ids: Any = None) -> np.ndarray:
        """Pass (True) or fail per score: each item against its group's threshold.

        Args:
          scores: 1-D scores (NaN fails: a missing score never passes).
          groups: each item's group, required when the gate was calibrated per group.
          ids: optional item ids (e.g. trajectory ids) for the error messages.

        Raises:
          ValueError: not calibrated; groups missing, of another length, or naming a group
            the gate has no threshold for (the message names the first such item).
        """
        if not self.calibrations_:
            raise ValueError("this Gate is not calibrated yet: call calibrate() or load a "
                             "gate file")
        s = np.asarray(scores, dtype=np.float64)
        if s.ndim != 1:
            raise ValueError(f"scores must be 1-D, got shape {s.shape}")
        if self.by_ is None:
            if groups is not None:
                raise ValueError("this gate has one threshold for every item; it was not "
                                 "calibrated per group, so groups must not be given")
            return self.calibrations_[None].passes(s)
        if groups is None:
            raise ValueError(f"this gate has one threshold per {self.by_} "
                             f"({', '.join(map(str, self.calibrations_))}): give groups")
        g = _group_labels(groups, len(s))
        known = np.array(list(self.calibrations_), dtype=object)
        unknown = ~np.isin(g, known)
        if unknown.any():
            i = int(np.flatnonzero(unknown)[0])
            who = f"trajectory {ids[i]!r}" if ids is not None else f"item {i}"
            raise ValueError(f"{who}: {self.by_} {g[i]!r} has no calibrated threshold (the "
                             f"gate has: {', '.join(map(str, self.calibrations_))})")
        out = np.zeros(len(s), bool)
        for name, cal in self.calibrations_.items():
            keep = g == name
            out[keep] = cal.passes(s[keep])
        return out

    # ------------------------------------------------------------------------- the file

    def to_dict(self) -> dict[str, Any]:
        """The gate as plain JSON-ready data (the gate file's content)."""
        gates = []
        for name, cal in self.calibrations_.items():
            gates.append({
                "group": name, "threshold": _json_number(cal.threshold),
                "n": cal.n_calibration, "n_passed": cal.n_passed,
                "pass_rate": cal.pass_rate, "failures": cal.failures,
                "failure_rate": _json_number(cal.failure_rate),
                "upper_bound": _json_number(cal.upper_bound), "reason": cal.reason,
                "table": cal.table})
        op = ">=" if self.higher_passes else "<="
        return {
            "format": GATE_FORMAT, "format_version": GATE_FORMAT_VERSION,
            "fastuq_version": _fastuq_version(), "score": self.score,
            "direction": f"pass iff score {op} threshold", "higher_passes": self.higher_passes,
            "alpha": self.alpha, "delta": self.delta, "procedure": self.procedure,
            "levels": self.levels, "starts": self.starts,
            "estimator": None if self.estimator is None else {
                "name": self.estimator, "params": self.params,
                "observation_noise": self.observation_noise},
            "by": self.by_, "gates": gates,
        }

    def save(self, path: str | os.PathLike) -> None:
        """Write the gate file (JSON, atomically)."""
        from fastuq.io.writers import atomic_write_text

        if not self.calibrations_:
            raise ValueError("this Gate is not calibrated yet: nothing to save")
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n")

    @classmethod
    def from_dict(cls, data: Any, source: str = "gate file") -> Gate:
        """A gate from :meth:`to_dict`'s data; ValueError naming ``source`` and the field
        when it is not a gate of a format this fastuq reads."""
        return _from_dict(cls, data, source)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Gate:
        """Read a gate file written by :meth:`save` (``fastuq gate calibrate -o``)."""
        from pathlib import Path

        try:
            text = Path(path).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{path}: not a gate file (not UTF-8 text)") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not a gate file (invalid JSON at line {exc.lineno}, "
                             f"column {exc.colno}: {exc.msg})") from None
        return _from_dict(cls, data, str(path))


def _fastuq_version() -> str:
    """The installed fastuq's version (the package's own when its metadata is missing)."""
    from importlib import metadata

    try:
        return metadata.version("fastuq")
    except metadata.PackageNotFoundError:
        import fastuq

        return fastuq.__version__


def _optional_float(value: Any) -> float:
    return math.nan if value is None else float(value)


def _group_labels(groups: Any, n: int) -> np.ndarray:
    g = np.asarray(groups, dtype=object)
    if g.ndim != 1 or len(g) != n:
        raise ValueError(f"groups must be 1-D with one label per score ({n}), got shape "
                         f"{g.shape}")
    missing = np.equal(g, None)
    if missing.any():
        raise ValueError(f"item {int(np.flatnonzero(missing)[0])} has no group")
    return g.astype(str).astype(object)


def _field(data: dict, name: str, kinds: tuple, source: str, *, none: bool = False) -> Any:
    if name not in data:
        raise ValueError(f"{source}: field {name!r} is missing")
    value = data[name]
    if value is None and none:
        return None
    if isinstance(value, bool) and bool not in kinds:
        raise ValueError(f"{source}: field {name!r} must be {_kinds(kinds)}, got {value!r}")
    if not isinstance(value, kinds):
        raise ValueError(f"{source}: field {name!r} must be {_kinds(kinds)}, got {value!r}")
    return value


def _kinds(kinds: tuple) -> str:
    names = {bool: "true/false", int: "an integer", float: "a number", str: "a string",
             dict: "an object", list: "a list"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _from_dict(cls, data: Any, source: str) -> Gate:
    if not isinstance(data, dict) or data.get("format") != GATE_FORMAT:
        raise ValueError(f"{source}: not a gate file (no \"format\": \"{GATE_FORMAT}\"); "
                         f"write one with fastuq gate calibrate -o")
    version = _field(data, "format_version", (int,), source)
    if version > GATE_FORMAT_VERSION:
        raise ValueError(f"{source}: gate format {version} is newer than this fastuq reads "
                         f"({GATE_FORMAT_VERSION}); upgrade fastuq")
    estimator = _field(data, "estimator", (dict,), source, none=True)
    name = params = noise = None
    if estimator is not None:
        name = _field(estimator, "name", (str,), f"{source}: estimator")
        params = _field(estimator, "params", (dict,), f"{source}: estimator")
        noise = _field(estimator, "observation_noise", (int, float), f"{source}: estimator",
                       none=True)
    levels = _field(data, "levels", (int, str), source)
    try:
        gate = cls(_field(data, "alpha", (int, float), source),
                   _field(data, "delta", (int, float), source),
                   score=_field(data, "score", (str,), source, none=True),
                   higher_passes=_field(data, "higher_passes", (bool,), source),
                   procedure=_field(data, "procedure", (str,), source), levels=levels,
                   starts=_field(data, "starts", (int,), source), estimator=name,
                   params=params, observation_noise=noise)
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None
    by = _field(data, "by", (str,), source, none=True)
    gates = _field(data, "gates", (list,), source)
    if not gates:
        raise ValueError(f"{source}: field 'gates' is empty")
    cals: dict[str | None, GateCalibration] = {}
    for i, entry in enumerate(gates):
        where = f"{source}: gates[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be an object")
        group = _field(entry, "group", (str,), where, none=True)
        if (group is None) != (by is None) or group in cals:
            raise ValueError(f"{where}: group {group!r} does not fit 'by' {by!r} (one "
                             f"ungrouped entry, or one entry per distinct {by})")
        thr = _field(entry, "threshold", (int, float), where, none=True)
        n_passed = _field(entry, "n_passed", (int,), where)
        if (thr is None) != (n_passed == 0):
            raise ValueError(f"{where}: threshold {thr!r} does not fit n_passed {n_passed}")
        if thr is None:
            thr = math.inf if gate.higher_passes else -math.inf
        cals[group] = GateCalibration(
            float(thr), gate.higher_passes, _field(entry, "n", (int,), where), n_passed,
            float(_field(entry, "pass_rate", (int, float), where)),
            _field(entry, "failures", (int,), where),
            _optional_float(_field(entry, "failure_rate", (int, float), where, none=True)),
            _optional_float(_field(entry, "upper_bound", (int, float), where, none=True)),
            gate.alpha, gate.delta, procedure=gate.procedure, levels=gate.levels,
            starts=gate.starts, table=_field(entry, "table", (dict,), where),
            reason=_field(entry, "reason", (str,), where))
    gate.calibrations_ = cals
    gate.by_ = by
    return gate
