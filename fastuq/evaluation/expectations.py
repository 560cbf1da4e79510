"""Expected metrics: load an expectations file and compare computed metrics with the expected
values at the precision each expected number is written with (:func:`load_expectations`,
:func:`check_expectations`; see :func:`check_expectations` for the rounding rule): what
``fastuq eval --expect`` checks. Nothing here imports JAX.
"""

from __future__ import annotations

import decimal
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl

from fastuq.metrics import METRICS

__all__ = ["Comparison", "EXPECTABLE", "ExpectationCheck", "check_expectations",
           "expected_metrics", "load_expectations", "parse_expectations", "round_like"]


#: Metrics an expectations file may list per estimator.
EXPECTABLE = (*METRICS, "accuracy")
def parse_expectations(text: str) -> dict[str, Any]:
    """Parse and validate an expectations JSON text, keeping every number as written.

    Format::

        {"units": "percent",            # or "fraction"; required
         "n": 2000,                     # optional: the number of trajectories
         "estimators": {"sauce": {"auroc": 63.25, "auarc": 80.1}}}

    Metric keys are those of :data:`EXPECTABLE`. Floats are parsed as :class:`Decimal`
    (``json.loads(text, parse_float=Decimal)``), so ``80.10`` keeps its two decimals. Other
    top-level keys (``"description"``, ``"source"``, ...) are ignored. Raises ValueError.
    """
    try:
        spec = json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError as exc:
        raise ValueError(f"expectations are not valid JSON: {exc}") from None
    if not isinstance(spec, dict):
        raise ValueError("expectations must be a JSON object")
    units = spec.get("units")
    if units not in ("percent", "fraction"):
        raise ValueError(f'expectations need "units": "percent" or "fraction", got {units!r}')
    n = spec.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
        raise ValueError(f'expected "n" must be a non-negative integer, got {n!r}')
    est = spec.get("estimators")
    if not isinstance(est, dict) or not est:
        raise ValueError('expectations need "estimators": {name: {metric: value, ...}, ...}')
    for name, metrics in est.items():
        if not isinstance(metrics, dict) or not metrics:
            raise ValueError(f"expected metrics of {name!r} must be a non-empty object")
        for metric, value in metrics.items():
            if metric not in EXPECTABLE:
                raise ValueError(
                    f"unknown metric {metric!r} for {name!r}; known: {', '.join(EXPECTABLE)}"
                )
            if isinstance(value, bool) or not isinstance(value, Decimal | int):
                raise ValueError(f"expected {name} {metric} must be a number, got {value!r}")
            if not Decimal(value).is_finite():
                raise ValueError(f"expected {name} {metric} must be finite, got {value}")
    return {"units": units, "n": n, "estimators": est}


def load_expectations(path: str | os.PathLike) -> dict[str, Any]:
    """Read and validate an expectations file; see :func:`parse_expectations`."""
    path = Path(path)
    try:
        return parse_expectations(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


@dataclass(frozen=True)
class Comparison:
    """One expected number against the computed one.

    ``estimator`` is ``""`` for the sample count ``n``. ``value`` is the computed value in
    the file's units (``None`` when the estimator was not evaluated, NaN when the metric is
    undefined); ``got`` is it rounded to the expected number's decimals (``None`` if
    ``value`` is missing or NaN).
    """

    estimator: str
    metric: str
    expected: Decimal
    value: float | None
    got: Decimal | None

    @property
    def ok(self) -> bool:
        """Whether the rounded computed value equals the expected one."""
        return self.got is not None and self.got == self.expected

    def describe(self) -> str:
        """``"sauce auroc: expected 63.25, got 63.31"``."""
        what = f"{self.estimator} {self.metric}" if self.estimator else self.metric
        if self.value is None:
            return f"{what}: expected {self.expected}, got nothing ({self.estimator!r} was " \
                   f"not evaluated)"
        got = "nan" if self.got is None else str(self.got)
        return f"{what}: expected {self.expected}, got {got}"


@dataclass(frozen=True)
class ExpectationCheck:
    """The result of :func:`check_expectations`."""

    units: str
    comparisons: tuple[Comparison, ...]

    @property
    def passed(self) -> bool:
        """True when every comparison matches."""
        return all(c.ok for c in self.comparisons)

    @property
    def mismatches(self) -> tuple[Comparison, ...]:
        """The comparisons that do not match, in file order."""
        return tuple(c for c in self.comparisons if not c.ok)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: units, passed, and every comparison (expected and rounded values as
        strings, to keep their decimals; the unrounded value as a float)."""
        return {
            "units": self.units,
            "passed": self.passed,
            "comparisons": [
                {
                    "estimator": c.estimator or None,
                    "metric": c.metric,
                    "expected": str(c.expected),
                    "got": None if c.got is None else str(c.got),
                    "value": None if c.value is None or math.isnan(c.value) else c.value,
                    "ok": c.ok,
                }
                for c in self.comparisons
            ],
        }


def round_like(value: float, expected: Decimal | int, *, scale: int = 0) -> Decimal | None:
    """``value * 10**scale`` rounded, half to even, to the decimals ``expected`` is written
    with; ``None`` for NaN. Exact: the float's own binary value, scaled in decimal (no
    float multiplication), is what is rounded."""
    if not math.isfinite(value):
        return None
    exponent = Decimal(expected).as_tuple().exponent
    assert isinstance(exponent, int)
    with decimal.localcontext() as ctx:
        ctx.prec = 1200  # a float64's exact decimal expansion has at most ~770 digits
        exact = Decimal(value).scaleb(scale)
        return exact.quantize(Decimal(1).scaleb(exponent), rounding=decimal.ROUND_HALF_EVEN)


def check_expectations(
    table: pl.DataFrame, expected: Mapping[str, Any] | str | os.PathLike
) -> ExpectationCheck:
    """Compare an :func:`evaluation_table` with expected values at their displayed precision.

    ``expected``: a parsed expectations mapping (:func:`parse_expectations`) or the path of
    an expectations file.

    Rounding rule: each computed value (a float64 fraction) is taken at its exact binary
    value, multiplied by 100 in exact decimal arithmetic when the file's units are
    ``"percent"``, and rounded half to even to as many decimals as the expected number is
    written with (``63.25``: 2; ``80.1``: 1; ``80.10``: 2; ``77``: 0). It matches when the
    rounded value equals the expected number; ``n`` (when given) must equal N exactly. The
    original SAUCE script compares ``round(value * 100, 2)`` with the paper's number; the two
    rules differ only when ``value * 100`` lies within about 1e-14 of a rounding boundary,
    where the float product's own rounding error decides the original's outcome.

    A NaN metric, or an estimator absent from ``table``, is a mismatch.
    """
    if not isinstance(expected, Mapping):
        expected = load_expectations(expected)
    units = expected["units"]
    scale = 2 if units == "percent" else 0
    rows = {r["estimator"]: r for r in table.iter_rows(named=True)}
    comparisons: list[Comparison] = []
    if expected.get("n") is not None:
        n = int(table["n"][0]) if table.height else 0
        comparisons.append(
            Comparison("", "n", Decimal(expected["n"]), float(n), Decimal(n))
        )
    for name, metrics in expected["estimators"].items():
        row = rows.get(name)
        for metric, want in metrics.items():
            want = Decimal(want)
            if row is None or metric not in row:
                comparisons.append(Comparison(name, metric, want, None, None))
                continue
            value = float(row[metric])
            shown = value * 10**scale if math.isfinite(value) else value
            comparisons.append(
                Comparison(name, metric, want, shown, round_like(value, want, scale=scale))
            )
    return ExpectationCheck(units, tuple(comparisons))


def expected_metrics(expected: Mapping[str, Any]) -> tuple[str, ...]:
    """Metrics (of :data:`fastuq.metrics.METRICS`) an expectations mapping lists."""
    wanted = {m for ms in expected["estimators"].values() for m in ms}
    return tuple(m for m in METRICS if m in wanted)
