"""The generic runner: any registered estimator on a packed chunk, through its kernel.

:func:`run_estimator` packs (and checks) the inputs the entry declares, resolves its
parameters per trajectory (protocol presets, overrides), and calls the JAX kernel over
bucketed, device-sharded chunks (:func:`fastuq.engine.runtime.run_bucketed`) or the NumPy
twin. :func:`call_kernel` is the same call on arrays already packed (for
:func:`fastuq.sauce_batch`, sweeps and fits).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from fastuq.engine.batch import Batch
from fastuq.engine.device_array import PlacedArray
from fastuq.engine.inputs import INPUTS, Context
from fastuq.engine.memory import check_memory
from fastuq.engine.registry import Estimator, get_estimator
from fastuq.engine.runtime import run_bucketed

__all__ = ["call_kernel", "kernel_arguments", "outputs_of", "place_plans",
           "prepare_estimator", "run_estimator", "run_estimator_rounds"]

#: Padding of a per-trajectory parameter array in a chunk's unused slots (inside every
#: built-in estimator's bounds; padded slots have no valid round or node anyway).
PARAM_FILL = 1.0


def outputs_of(est: Estimator, result) -> dict[str, np.ndarray]:
    """A kernel's result as ``{output column: [N]}``."""
    if isinstance(result, Mapping):
        missing = [o for o in est.outputs if o not in result]
        if missing:
            raise ValueError(f"estimator {est.name!r}: its kernel returned no {missing}")
        return {o: result[o] for o in est.outputs}
    if len(est.outputs) != 1:
        raise ValueError(f"estimator {est.name!r} declares outputs {est.outputs}; its kernel "
                         "must return a dict of them")
    return {est.outputs[0]: result}


def _apply(*arrays, estimator: str, n_inputs: int, optional: tuple[str, ...],
           params: tuple[str, ...], per_round: bool = False):
    """The registered JAX kernel of ``estimator`` on flat positional arrays (a stable
    function of static names, so compiled per-device wrappers are cached); with
    ``per_round``, its per-round kernel, the ``[T, N]`` per-round score added under
    :attr:`~fastuq.engine.estimator.Estimator.per_round_column`."""
    est = get_estimator(estimator)
    inputs = arrays[:n_inputs]
    # the shapes as this device gets them (padded; traced under shard_map): a call that
    # cannot fit is refused here, before the kernel allocates anything
    check_memory(est, [x.shape for x in inputs], inputs[0].dtype, "jax")
    rest = arrays[n_inputs:]
    kw = dict(zip(optional, rest[:len(optional)], strict=True))
    kw.update(zip(params, rest[len(optional):], strict=True))
    if per_round:
        result, rounds = est.per_round_fn("jax")(*inputs, **kw)
        return {**outputs_of(est, result), est.per_round_column: rounds}
    return outputs_of(est, est.kernel_fn("jax")(*inputs, **kw))


def call_kernel(
    est: Estimator,
    inputs: Sequence[np.ndarray],
    optional: Mapping[str, np.ndarray | None],
    params: Mapping[str, np.ndarray],
    *,
    n: int,
    dtype: np.dtype,
    backend: str,
    chunk_size: int = 1 << 20,
    per_round: bool = False,
) -> dict[str, np.ndarray]:
    """``est``'s kernel on packed arrays: ``{output: [N]}``.

    Args:
      inputs: the arrays of ``est.inputs``, in order (batch axis as in
        :data:`~fastuq.engine.inputs.INPUTS`).
      optional: arrays of ``est.optional_inputs`` (``None``: absent, not passed).
      params: kernel parameters, each a 0-d array or ``[N]``.
      n, dtype: trajectories and the float dtype; backend: ``"jax"`` or ``"numpy"``.
      chunk_size: the largest chunk handed to the JAX kernel (a power of two).
      per_round: run the estimator's per-round kernel instead (ValueError when it has
        none): the same outputs, computed by the same scan as the per-round score ``[T, N]``
        added under ``est.per_round_column`` (NaN where the round is masked).
    """
    present = {k: v for k, v in optional.items() if v is not None}
    if backend == "numpy":  # host kernels: device-packed inputs come back unpadded
        inputs = [np.asarray(x) for x in inputs]
        check_memory(est, [x.shape for x in inputs], dtype, "numpy")
        present = {k: np.asarray(v) for k, v in present.items()}
        if per_round:
            result, rounds = est.per_round_fn("numpy")(*inputs, **present, **params)
            return {**outputs_of(est, result), est.per_round_column: rounds}
        return outputs_of(est, est.kernel_fn("numpy")(*inputs, **present, **params))
    # checks the backend; import errors before the bucketed loop
    est.per_round_fn(backend) if per_round else est.kernel_fn(backend)
    batched = kernel_arguments(est, inputs, present, params)
    return run_bucketed(_apply, batched, n, dtype, chunk_size, estimator=est.name,
                        n_inputs=len(est.inputs), optional=tuple(present),
                        params=tuple(params), per_round=per_round)


def kernel_arguments(est: Estimator, inputs: Sequence, optional: Mapping,
                     params: Mapping) -> list[tuple]:
    """``(array, batch_axis, pad_fill)`` of each argument of ``est``'s JAX kernel, in order:
    its inputs, the optional ones present (``None``: absent), its parameters."""
    batched = [(x, INPUTS[name].axis, INPUTS[name].fill)
               for name, x in zip(est.inputs, inputs, strict=True)]
    batched += [(x, INPUTS[name].axis, INPUTS[name].fill) for name, x in optional.items()
                if x is not None]
    batched += [(v if isinstance(v, PlacedArray) else np.asarray(v), 0, PARAM_FILL)
                for v in params.values()]
    return batched


def place_plans(plans: Sequence[tuple], n: int, dtype: np.dtype) -> list[tuple]:
    """The prepared estimators of one chunk (``(est, (inputs, optional, values))`` each, as
    :func:`prepare_estimator` returns them) with every input and per-trajectory parameter
    placed on the devices in one transfer (:func:`~fastuq.engine.runtime.place_batched`),
    for :func:`call_kernel` with the JAX backend. A pack's chunk is scored so."""
    from fastuq.engine.runtime import place_batched

    groups = [kernel_arguments(est, inputs, optional, values)
              for est, (inputs, optional, values) in plans]
    placed = place_batched(groups, n, dtype)
    out = []
    for (est, (inputs, optional, values)), args in zip(plans, placed, strict=True):
        it = iter([x for x, _, _ in args])
        new_inputs = [next(it) for _ in inputs]
        new_optional = {k: (None if v is None else next(it)) for k, v in optional.items()}
        new_values = {k: next(it) for k in values}
        out.append((est, (new_inputs, new_optional, new_values)))
    return out


def run_estimator(
    est: Estimator, batch: Batch, *, params: Mapping[str, object], protocol: str | None,
    backend: str,
) -> dict[str, np.ndarray]:
    """Score ``batch`` with ``est``: ``{output column: [N] uncertainty}``.

    Args:
      params: parameter overrides by name (``None``: not given); each estimator takes the
        ones it declares.
      protocol: the preset for every trajectory (default: each record's ``protocol``; read
        only when a parameter comes from a preset).
    """
    inputs, optional, values = prepare_estimator(est, batch, params=params, protocol=protocol)
    return call_kernel(est, inputs, optional, values, n=batch.n, dtype=batch.dtype,
                       backend=backend)


def prepare_estimator(
    est: Estimator, batch: Batch, *, params: Mapping[str, object], protocol: str | None,
) -> tuple[list[np.ndarray], dict[str, np.ndarray | None], dict[str, np.ndarray]]:
    """Everything :func:`run_estimator` does before the kernel: ``(inputs, optional,
    values)``, the packed and checked inputs and the kernel parameters, for
    :func:`call_kernel` (so that a pipeline can prepare one chunk while the kernel runs on
    the one before). Raises what the checks raise."""
    packing = est.packing(params)
    ctx = Context(batch, packing, est.inputs)
    inputs = [INPUTS[name].build(ctx) for name in est.inputs]
    optional = {name: INPUTS[name].build(ctx) for name in est.optional_inputs}
    overrides = {p.name: params.get(p.name) for p in est.kernel_params}
    protos = None
    if any(isinstance(v, Mapping) for v in overrides.values()) or (
            est.presets and any(v is None for v in overrides.values())):
        # a per-protocol override is read by protocol whether or not the estimator has
        # presets (without them, it was ignored and the default used)
        protos = batch.protocol(protocol)
    values = est.param_values(batch.n, protos, overrides, batch.dtype, batch.labels)
    return inputs, optional, values


def run_estimator_rounds(
    est: Estimator, batch: Batch, *, params: Mapping[str, object], protocol: str | None,
    backend: str, output: str | None = None, by_prefix: bool = False,
) -> np.ndarray:
    """``est``'s score had the debate stopped after each round: ``[T, N]`` float64, row ``t``
    the score of rounds ``0..t`` (NaN where round ``t`` did not execute).

    An estimator with a per-round kernel (:attr:`~fastuq.engine.estimator.Estimator.
    per_round`) gives its first output's rows from one scan over the rounds, the row of a
    trajectory's last round bit for bit its score. Otherwise (or for another ``output``)
    round ``t``'s prefix is the packed inputs with every later round set to its padding
    value (:data:`~fastuq.engine.inputs.INPUTS`' ``fill``: masks false, classes -1), exactly
    as a trajectory of ``t + 1`` rounds is packed, so the row of a trajectory's last round is
    its full score: one kernel call per round.

    Args:
      output: which output column (default: the estimator's first, its score).
      by_prefix: one kernel call per round prefix even where a per-round kernel exists (the
        same numbers up to the kernels' rounding; for checks and timings).
    """
    inputs, optional, values = prepare_estimator(est, batch, params=params, protocol=protocol)
    column = output or est.outputs[0]
    if column not in est.outputs:
        raise ValueError(f"estimator {est.name!r} has no output {column!r}; it writes "
                         f"{', '.join(est.outputs)}")
    executed = batch.rounds("agreement")[1] if batch.has("agreement") else None
    if est.per_round is not None and column == est.outputs[0] and not by_prefix:
        res = call_kernel(est, inputs, optional, values, n=batch.n, dtype=batch.dtype,
                          backend=backend, per_round=True)
        out = np.array(res[est.per_round_column], np.float64)
    else:
        out = _rounds_by_prefix(est, batch, inputs, optional, values, column, backend)
    if executed is not None and executed.shape[0] == out.shape[0]:
        out[~executed] = np.nan
    return out


def _rounds_by_prefix(est: Estimator, batch: Batch, inputs, optional, values, column: str,
                      backend: str) -> np.ndarray:
    """:func:`run_estimator_rounds` without a per-round kernel: one kernel call per round
    prefix."""
    inputs = [np.asarray(x) for x in inputs]  # cut per round on the host
    optional = {k: None if v is None else np.asarray(v) for k, v in optional.items()}
    timed = [INPUTS[name].axis == 1 for name in est.inputs]
    n_t = max((x.shape[0] for x, tm in zip(inputs, timed, strict=True) if tm), default=1)
    out = np.full((n_t, batch.n), np.nan)
    for t in range(n_t):
        cut = [_prefix(x, t, INPUTS[name].fill) if tm else x
               for name, x, tm in zip(est.inputs, inputs, timed, strict=True)]
        # only inputs with a round axis are cut (team_size is one value per trajectory)
        opt = {k: (v if v is None or INPUTS[k].axis != 1 else _prefix(v, t, INPUTS[k].fill))
               for k, v in optional.items()}
        res = call_kernel(est, cut, opt, values, n=batch.n, dtype=batch.dtype, backend=backend)
        out[t] = np.asarray(res[column], np.float64)
    return out


def _prefix(x: np.ndarray, t: int, fill) -> np.ndarray:
    """``x [T, ...]`` with rounds after ``t`` set to ``fill``."""
    if x.shape[0] <= t + 1:
        return x
    cut = x.copy()
    cut[t + 1:] = fill
    return cut
