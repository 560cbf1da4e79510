"""What an estimator is: its parameters (:class:`Param`: default, bounds, choices, per-protocol
presets) and its declaration (:class:`Estimator`: the packed inputs it reads, its kernels
named by ``"module:function"`` and imported on first use, its output columns, and the
per-trajectory parameter arrays it builds from protocol presets and overrides). The entries
themselves, and registering one, are :mod:`fastuq.engine.registry`'s; the kernel contract
is stated there.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from fastuq.errors import RecordError

__all__ = ["Estimator", "Param", "finite"]


def finite(value: object, name: str) -> float:
    """``value`` as a float; ValueError naming ``name`` unless it is a finite number."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a finite number, got {value!r}") from exc
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return number


@dataclass(frozen=True)
class Param:
    """One estimator parameter.

    name: the keyword (``--name`` on the command line where the CLI has it).
    default: the value when neither the caller nor a protocol preset gives one (``None``:
      no default; then every protocol needs a preset).
    low, high: bounds (``None``: unbounded); ``low_open`` / ``high_open`` make them strict.
    choices: for a string parameter, the values it may take.
    integer: the value must be a whole number (a count: agents, rounds).
    kernel: whether the kernel takes it (``False``: it chooses how inputs are packed, e.g.
      UMAS's ``confidence``).
    doc: one line for tables and ``--help``.
    """

    name: str
    default: float | str | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[str, ...] | None = None
    integer: bool = False
    kernel: bool = True
    doc: str = ""

    def describe(self) -> str:
        """The allowed range in words: ``in [0, 1]``, ``>= 0``, ``> 0`` or ``finite``
        (``a whole number >= 0`` for an integer parameter)."""
        def g(x: float) -> str:
            return f"{x:g}"

        whole = "a whole number " if self.integer else ""
        if self.low is not None and self.high is not None:
            return (f"{whole}in {'(' if self.low_open else '['}{g(self.low)}, {g(self.high)}"
                    f"{')' if self.high_open else ']'}")
        if self.low is not None:
            return f"{whole}{'>' if self.low_open else '>='} {g(self.low)}"
        if self.high is not None:
            return f"{whole}{'<' if self.high_open else '<='} {g(self.high)}"
        return "a whole number" if self.integer else "finite"

    def inside(self, v: np.ndarray) -> np.ndarray:
        """Elementwise: finite and within the bounds."""
        v = np.asarray(v, np.float64)
        ok = np.isfinite(v)
        if self.low is not None:
            ok &= (v > self.low) if self.low_open else (v >= self.low)
        if self.high is not None:
            ok &= (v < self.high) if self.high_open else (v <= self.high)
        if self.integer:
            with np.errstate(invalid="ignore"):
                ok &= np.floor(v) == v
        return ok

    def check(self, value: object) -> float | str:
        """A scalar value checked (ValueError naming the parameter and its range)."""
        if self.choices is not None:
            if value not in self.choices:
                raise ValueError(f"{self.name} must be one of {self.choices}, got {value!r}")
            return value  # type: ignore[return-value]
        number = finite(value, self.name)
        if not self.inside(np.asarray(number)):
            raise ValueError(f"{self.name} must be {self.describe()}, got {number}")
        return number


def _target(spec: str | Callable, package: str | None) -> Callable:
    if callable(spec):
        return spec
    module, _, func = spec.partition(":")
    if package and "." not in module:
        module = f"{package}.{module}"
    return getattr(importlib.import_module(module), func)


@dataclass(frozen=True)
class Estimator:
    """One estimator: everything the engine needs, declared once.

    name: the estimator's name (``fastuq score --method NAME``).
    inputs: packed inputs its kernel takes positionally, values then masks (names from
      :data:`fastuq.engine.inputs.INPUTS`, e.g. ``("agreement", "token_entropy",
      "round_mask")``). Only these are packed.
    kernel, twin, reference: the JAX kernel, its NumPy twin and the per-trajectory
      reference, as ``"module:function"`` (a bare module name is inside ``fastuq.kernels``)
      or callables; the contract is in the module docstring.
    params: its parameters (:class:`Param`), passed to the kernel by keyword.
    optional_inputs: packed inputs passed by keyword when the corpus has them
      (``team_size``, ``edges``).
    presets: protocol -> parameter values (used for parameters the caller does not give).
    outputs: output columns (default: the name); a kernel with several returns a dict.
    scores: the outputs that are uncertainty scores (higher: less certain), the columns
      ``fastuq eval``, ``fastuq report`` and the stack evaluate; default: the output named as
      the estimator (others, like UAAD's tier or stop round, are not scores).
    description: one line for ``--help`` and tables.
    memory: ``memory(shapes, dtype, backend)`` -> ``(bytes, what)``: the largest array its
      kernel (``backend="jax"``, ``shapes`` the inputs' shapes as one device gets them,
      padded) or twin (``"numpy"``) allocates, as ``"module:function"`` or a callable; the
      runner refuses a chunk whose array would not fit in the device's memory before
      allocating it (``None``: no estimate).
    per_round: ``(kernel, twin)`` of its per-round form, as ``"module:function"`` or
      callables (``None``: it has none): the kernel's arguments, returning ``(result,
      per_round)``, ``result`` what the kernel returns and ``per_round`` ``[T, N]`` the
      score (the first output) of the trajectory cut after each round, from the same scan
      (NaN where the round is masked; at the last executed round, the score's bits). Only
      for an estimator whose inputs include ``round_mask``, or ``node_mask`` (a round with a
      valid node is executed): the rounds a score is given for; ``fastuq score
      --per-round`` writes it as the list column ``<first output>_per_round``.
    constraints: ``constraints(values, ids)`` -> None, raising ValueError where parameters
      that are each within their bounds do not fit together (UAAD: the weights sum to 1,
      ``risk_low < risk_high``). Called with the checked packing parameters (``ids``
      ``None``) and with the kernel parameters (0-d or ``[N]`` arrays, ``ids`` the
      trajectory names or ``None``); it looks only at the names present.
    """

    name: str
    inputs: tuple[str, ...]
    kernel: str | Callable
    twin: str | Callable
    reference: str | Callable
    params: tuple[Param, ...] = ()
    optional_inputs: tuple[str, ...] = ()
    presets: Mapping[str, Mapping[str, float]] = field(
        default_factory=lambda: MappingProxyType({}))
    outputs: tuple[str, ...] = ()
    description: str = ""
    constraints: Callable[[Mapping[str, Any], Sequence[str] | None], None] | None = None
    memory: str | Callable | None = None
    per_round: tuple[str | Callable, str | Callable] | None = None
    scores: tuple[str, ...] = ()
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.outputs:
            object.__setattr__(self, "outputs", (self.name,))
        if not self.scores:
            object.__setattr__(self, "scores",
                               (self.name,) if self.name in self.outputs else ())
        extra = [c for c in self.scores if c not in self.outputs]
        if extra:
            raise ValueError(f"estimator {self.name!r}: scores {extra} are not among its "
                             f"outputs {list(self.outputs)}")
        if self.per_round is not None:
            if len(self.per_round) != 2:
                raise ValueError(f"estimator {self.name!r}: per_round must be (kernel, twin), "
                                 f"got {self.per_round!r}")
            if not {"round_mask", "node_mask"} & set(self.inputs):
                raise ValueError(f"estimator {self.name!r}: per_round needs round_mask or "
                                 f"node_mask among its inputs (the rounds a per-round score "
                                 f"is given for)")

    def executed_rounds(self, inputs: Sequence[Any]) -> np.ndarray:
        """``[T, N]`` bool, the rounds a per-round score is given for, from the packed
        ``inputs`` (in ``self.inputs`` order): ``round_mask``, else the rounds with a valid
        node of ``node_mask``."""
        if "round_mask" in self.inputs:
            return np.asarray(inputs[self.inputs.index("round_mask")], bool)
        return np.asarray(inputs[self.inputs.index("node_mask")], bool).any(axis=2)

    @property
    def per_round_column(self) -> str:
        """The per-round output column: ``<first output>_per_round``."""
        return f"{self.outputs[0]}_per_round"

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    @property
    def kernel_params(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.kernel)

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def kernel_fn(self, backend: str) -> Callable:
        """The kernel for ``backend`` (``"jax"``, or ``"numpy"``: the twin), imported on first
        use."""
        if backend not in ("jax", "numpy"):
            raise ValueError(f"backend must be 'jax' or 'numpy', got {backend!r}")
        if backend not in self._cache:
            spec = self.kernel if backend == "jax" else self.twin
            self._cache[backend] = _target(spec, "fastuq.kernels")
        return self._cache[backend]

    def per_round_fn(self, backend: str) -> Callable:
        """The per-round kernel for ``backend`` (``"jax"``, or ``"numpy"``: its twin),
        imported on first use; ValueError when the estimator has none."""
        if backend not in ("jax", "numpy"):
            raise ValueError(f"backend must be 'jax' or 'numpy', got {backend!r}")
        if self.per_round is None:
            raise ValueError(f"estimator {self.name!r} has no per-round score")
        key = ("per_round", backend)
        if key not in self._cache:
            spec = self.per_round[0 if backend == "jax" else 1]
            self._cache[key] = _target(spec, "fastuq.kernels")
        return self._cache[key]

    def memory_fn(self) -> Callable | None:
        """The memory estimate (``None``: none), imported on first use."""
        if self.memory is None:
            return None
        if "memory" not in self._cache:
            self._cache["memory"] = _target(self.memory, "fastuq.kernels")
        return self._cache["memory"]

    def reference_fn(self) -> Callable:
        """The per-trajectory reference, imported on first use."""
        if "reference" not in self._cache:
            self._cache["reference"] = _target(self.reference, "fastuq.kernels")
        return self._cache["reference"]

    def lacking(self, protocol: str | None, overrides: Mapping[str, object]) -> list[str]:
        """The kernel parameters that neither ``overrides`` (non-``None`` values), nor the
        preset of ``protocol``, nor a default give, in declaration order (empty: the
        estimator can run for ``protocol``)."""
        preset = self.presets.get(protocol) if protocol is not None else None
        return [p.name for p in self.kernel_params
                if overrides.get(p.name) is None
                and (preset is None or preset.get(p.name) is None) and p.default is None]

    def no_preset_message(self, protocol: str | None, missing: Sequence[str]) -> str:
        """Why the estimator cannot run for ``protocol``: every parameter it ``missing``, and
        the two ways out (give them, or score every record under one preset with
        ``--protocol`` / ``protocol=``)."""
        known = sorted(self.presets)
        what = "no protocol" if protocol is None else f"protocol {protocol!r} has no preset"
        flags = ", ".join("--" + m.replace("_", "-") for m in missing)
        use = (f", or score every record under one preset with --protocol "
               f"{'|'.join(known)} (protocol= in Python)" if known else "")
        return (f"{self.name}: {what} (presets: {', '.join(known) or 'none'}), so "
                f"{', '.join(missing)} have no value: give them ({flags}, or --param "
                f"NAME=VALUE){use}")

    def resolve(self, protocol: str | None, overrides: Mapping[str, object]) -> dict[str, Any]:
        """Kernel parameter values for ``protocol``: the non-``None`` ``overrides``, else the
        protocol's preset, else the default.

        Raises ValueError, listing every parameter that has none of the three (and
        suggesting ``--protocol``), when any has none."""
        missing = self.lacking(protocol, overrides)
        if missing:
            raise ValueError(self.no_preset_message(protocol, missing))
        preset = self.presets.get(protocol) if protocol is not None else None
        values: dict[str, Any] = {}
        for p in self.kernel_params:
            value = overrides.get(p.name)
            if value is None and preset is not None:
                value = preset.get(p.name)
            if value is None:
                value = p.default
            values[p.name] = value
        return values

    def packing(self, params: Mapping[str, object]) -> dict[str, object]:
        """The values of the parameters that choose how inputs are packed (``kernel=False``),
        checked, with defaults."""
        out = {}
        for p in self.params:
            if not p.kernel:
                value = params.get(p.name)
                out[p.name] = p.default if value is None else p.check(value)
        if self.constraints is not None and out:
            self.constraints(out, None)
        return out

    def param_values(
        self, n: int, protocol: str | Sequence[str] | Any | None,
        overrides: Mapping[str, Any], dtype, ids: Sequence[str] | None = None,
    ) -> dict[str, np.ndarray]:
        """Kernel parameters for ``n`` trajectories, validated: a 0-d array where one value
        serves all, else ``[N]`` (per-trajectory overrides, or per-protocol presets).

        Args:
          protocol: one name, one per trajectory (a sequence or Arrow array), or ``None``
            (no presets are consulted).
          overrides: parameter -> a scalar, an array broadcasting to ``[N]``, or a mapping
            protocol -> value (protocols it does not name keep their preset).
          ids: trajectory names for error messages.
        """
        kp = self.kernel_params
        if not kp:
            return {}
        if protocol is None or isinstance(protocol, str):
            names, inverse = [protocol], None
        else:
            names, inverse = _encode(protocol, n)
        resolved = []
        for k, proto in enumerate(names):
            own = {p: (v.get(str(proto)) if isinstance(v, Mapping) else v)
                   for p, v in overrides.items()}
            try:
                resolved.append(self.resolve(None if proto is None else str(proto), own))
            except ValueError as exc:
                if inverse is None:
                    raise
                row = int(np.argmax(inverse == k))
                who = f"trajectory {ids[row]!r}" if ids is not None else f"trajectory {row}"
                raise RecordError(f"{who}: {exc} (field protocol)", row=row) from None
        out = {}
        for p in kp:
            given = overrides.get(p.name)
            if given is not None and not isinstance(given, Mapping):
                v = np.asarray(given, np.float64)
            elif inverse is None:
                v = np.asarray(resolved[0][p.name], np.float64)
            else:
                # one value per distinct protocol, checked there (each one occurs: the
                # names are the chunk's distinct protocols), then gathered to [N] in dtype
                table = np.asarray([r[p.name] for r in resolved], np.float64)
                if not np.isfinite(table).all():
                    raise ValueError(f"{p.name} must be finite")
                if not p.inside(table).all():
                    bad = float(table[np.argmax(~p.inside(table))])
                    raise ValueError(f"{p.name} must be {p.describe()}, got {bad:g}")
                out[p.name] = table.astype(dtype)[inverse]
                continue
            if v.ndim:
                try:
                    v = np.ascontiguousarray(np.broadcast_to(v, (n,)))
                except ValueError:
                    raise ValueError(
                        f"{p.name} must be a scalar or broadcast to ({n},), got shape {v.shape}"
                    ) from None
            if not np.isfinite(v).all():
                raise ValueError(f"{p.name} must be finite")
            if not p.inside(v).all():
                bad = float(v.reshape(-1)[np.argmax(~p.inside(v).reshape(-1))])
                raise ValueError(f"{p.name} must be {p.describe()}, got {bad:g}")
            out[p.name] = v.astype(dtype)
        if self.constraints is not None:
            self.constraints(out, ids)
        return out


def _encode(values, n: int) -> tuple[list[str], np.ndarray]:
    """Distinct strings and each element's index into them (Arrow's dictionary encoding: a
    C++ hash pass, ~10x faster than ``np.unique`` on a million Python strings)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    if not isinstance(values, pa.Array):
        values = np.asarray(values)
        if values.dtype.kind not in "OUS":
            raise ValueError(f"protocol must hold strings, got dtype {values.dtype}")
        try:  # Python strings convert directly (10x faster than astype(str) first)
            values = pa.array(values, pa.string())
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            raise ValueError("protocol must hold strings (one per trajectory)") from None
    if len(values) != n:
        raise ValueError(f"protocol must be a string or one per trajectory ({n}), got "
                         f"{len(values)}")
    if values.null_count:
        row = int(np.argmax(values.is_null().to_numpy(zero_copy_only=False)))
        raise RecordError(f"trajectory {row}: no protocol (field protocol)", row=row)
    enc = pc.dictionary_encode(values.cast(pa.string()))
    return enc.dictionary.to_pylist(), enc.indices.to_numpy(zero_copy_only=False)
