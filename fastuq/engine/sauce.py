"""SAUCE: the seed package's per-trajectory API and the batched engine over many trajectories.

Per trajectory (exact, plain Python floats, the original package's semantics):
:func:`lambda_kalman_forward`, :func:`sauce`, :func:`sauce_score`.
Batched (JAX kernel or its NumPy twin, float32 or float64): :func:`sauce_batch`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fastuq.engine.inputs import validate_rounds
from fastuq.engine.registry import SAUCE_PRESETS, get_estimator
from fastuq.engine.registry import finite as _finite
from fastuq.engine.runtime import device_scope, run_bucketed
from fastuq.errors import RecordError
from fastuq.io.pack import pack_ragged
from fastuq.kernels.constants import ENTROPY_FLOOR, GAIN_EPS, VARIANCE_FLOOR

__all__ = [
    "ENTROPY_FLOOR",
    "GAIN_EPS",
    "PRESETS",
    "VARIANCE_FLOOR",
    "lambda_kalman_forward",
    "sauce",
    "sauce_batch",
    "sauce_score",
]

#: SAUCE presets per protocol: lam, q, sigma2_0 (initial variance v0), mu_0.
PRESETS = SAUCE_PRESETS

ArrayLike = Any


def lambda_kalman_forward(
    observations: Sequence[float],
    R_values: Sequence[float],
    *,
    lam: float = 0.95,
    q: float = 0.10,
    sigma2_0: float = 0.25,
    mu_0: float = 0.0,
) -> dict[str, Any]:
    """The scalar lambda-Kalman filter over one trajectory's rounds.

    Args:
      observations: ``[T]`` observations M_t (agreement).
      R_values: ``[T]`` measurement noise R_t >= 0 (used as given; :func:`sauce` floors the
        entropy at 1e-8 before calling this).
      lam, q, sigma2_0, mu_0: forgetting factor in [0, 1], process noise >= 0, prior
        variance > 0, prior mean. Defaults are the debate preset.

    Returns:
      dict with the parameters, ``rounds`` (one dict per round: ``round_index``, ``mu``,
      ``sigma2``, ``S_t`` (innovation variance = gain denominator, ``P + R_t + 1e-8``),
      ``K_t``, ``nu_t``), ``final_mu``, ``final_sigma2``, ``avg_mu``, ``avg_sigma2``.

    Raises:
      ValueError: empty or mismatched inputs, non-finite values, negative R_t, parameters
        out of range.
    """
    if len(observations) != len(R_values):
        raise ValueError(
            f"observations ({len(observations)} rounds) and R_values ({len(R_values)} rounds) "
            "must have the same length"
        )
    if len(observations) == 0:
        raise ValueError("a trajectory must contain at least one round")
    est = get_estimator("sauce")
    lam, q, sigma2_0, mu_0 = (est.param(name).check(value) for name, value in
                              (("lam", lam), ("q", q), ("sigma2_0", sigma2_0), ("mu_0", mu_0)))
    observations = [_finite(obs, f"observations[{t}]") for t, obs in enumerate(observations)]
    noises = []
    for t, noise in enumerate(R_values):
        r_t = _finite(noise, f"R_values[{t}]")
        if r_t < 0.0:
            raise ValueError(f"R_values[{t}] must be >= 0, got {r_t}")
        noises.append(r_t)
    from fastuq.kernels.sauce import lambda_kalman_trajectory

    trace = lambda_kalman_trajectory(observations, noises, lam=lam, q=q, sigma2_0=sigma2_0,
                                     mu_0=mu_0)
    return {"lam": lam, "q": q, "mu_0": mu_0, "sigma2_0": sigma2_0, **trace}


def _preset(protocol: str) -> Mapping[str, float]:
    if protocol not in PRESETS:
        raise ValueError(f"protocol must be one of {sorted(PRESETS)}, got {protocol!r}")
    return PRESETS[protocol]


def sauce(
    agreement: Sequence[float],
    token_entropy: Sequence[float],
    protocol: str = "debate",
    *,
    lam: float | None = None,
    q: float | None = None,
    sigma2_0: float | None = None,
    mu_0: float | None = None,
) -> dict[str, Any]:
    """SAUCE uncertainty of one trajectory (higher = less likely correct).

    Args:
      agreement: ``[T]`` majority margin per executed round, each in [0, 1].
      token_entropy: ``[T]`` mean token entropy per round in nats, each >= 0 (floored at
        1e-8 to give the measurement noise R_t).
      protocol: preset, ``"debate"`` or ``"dylan"`` (see :data:`PRESETS`).
      lam, q, sigma2_0, mu_0: override single preset values.

    Returns:
      ``{"score": -avg_mu, "trace": lambda_kalman_forward(...)}``.

    Raises:
      ValueError: empty or mismatched sequences, None/NaN/inf values, agreement outside
        [0, 1], negative entropy, unknown protocol, parameters out of range.
    """
    preset = _preset(protocol)
    if len(agreement) != len(token_entropy):
        raise ValueError(
            f"agreement ({len(agreement)} rounds) and token_entropy ({len(token_entropy)} "
            "rounds) must have the same length"
        )
    observations = []
    for t, value in enumerate(agreement):
        m_t = _finite(value, f"agreement[{t}]")
        if not 0.0 <= m_t <= 1.0:
            raise ValueError(f"agreement[{t}] must be in [0, 1], got {m_t}")
        observations.append(m_t)
    noises = []
    for t, value in enumerate(token_entropy):
        h_t = _finite(value, f"token_entropy[{t}]")
        if h_t < 0.0:
            raise ValueError(f"token_entropy[{t}] must be >= 0, got {h_t}")
        noises.append(max(h_t, ENTROPY_FLOOR))
    trace = lambda_kalman_forward(
        observations,
        noises,
        lam=preset["lam"] if lam is None else lam,
        q=preset["q"] if q is None else q,
        sigma2_0=preset["sigma2_0"] if sigma2_0 is None else sigma2_0,
        mu_0=preset["mu_0"] if mu_0 is None else mu_0,
    )
    return {"score": -trace["avg_mu"], "trace": trace}


def sauce_score(
    agreement: Sequence[float],
    token_entropy: Sequence[float],
    protocol: str = "debate",
    *,
    lam: float | None = None,
    q: float | None = None,
    sigma2_0: float | None = None,
    mu_0: float | None = None,
) -> float:
    """The SAUCE uncertainty of one trajectory as a float (see :func:`sauce`)."""
    return sauce(
        agreement, token_entropy, protocol, lam=lam, q=q, sigma2_0=sigma2_0, mu_0=mu_0
    )["score"]


# --------------------------------------------------------------------------- batched engine


def _as_batch(
    agreement: ArrayLike, token_entropy: ArrayLike, round_mask: ArrayLike | None, dtype
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normalise inputs to ``([T, N], [T, N], round_mask [T, N])``."""
    if isinstance(agreement, np.ndarray) or hasattr(agreement, "__array_namespace__"):
        a = np.asarray(agreement)
        h = np.asarray(token_entropy)
        if a.ndim != 2 or h.shape != a.shape:
            raise ValueError(
                "padded input must be time-major arrays [T, N] of one shape; got agreement "
                f"{a.shape} and token_entropy {h.shape}"
            )
        if round_mask is None:
            mask = np.ones(a.shape, bool)
        else:
            mask = np.asarray(round_mask)
            if mask.shape != a.shape or mask.dtype != bool:
                raise ValueError(
                    f"round_mask must be a bool array of shape {a.shape}, got "
                    f"{mask.dtype} {mask.shape}"
                )
        if dtype is None:
            dtype = a.dtype if a.dtype == np.float32 else np.float64
        return a.astype(dtype, copy=False), h.astype(dtype, copy=False), mask
    # Ragged: one sequence per trajectory.
    if round_mask is not None:
        raise ValueError("round_mask is only for padded arrays; ragged lists carry their lengths")
    if len(agreement) != len(token_entropy):
        raise ValueError(
            f"agreement has {len(agreement)} trajectories, token_entropy {len(token_entropy)}"
        )
    for name, rows in (("agreement", agreement), ("token_entropy", token_entropy)):
        if any(isinstance(r, (str, bytes)) or not hasattr(r, "__len__") for r in rows):
            raise ValueError(f"{name}: ragged input must be one sequence of floats per trajectory")
    try:
        a, mask = pack_ragged(agreement)
        h, mask_h = pack_ragged(token_entropy, t_max=a.shape[0])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"ragged input holds a value that is not a number: {exc}") from exc
    if not np.array_equal(mask, mask_h):
        n = int(np.argmax((mask != mask_h).any(axis=0)))
        raise RecordError(
            f"trajectory {n}: agreement has {len(agreement[n])} rounds but token_entropy has "
            f"{len(token_entropy[n])} (field token_entropy)", row=n
        )
    dtype = np.float64 if dtype is None else dtype
    return a.astype(dtype, copy=False), h.astype(dtype, copy=False), mask


def sauce_batch(
    agreement: ArrayLike,
    token_entropy: ArrayLike,
    round_mask: ArrayLike | None = None,
    *,
    protocol: str | Sequence[str] = "debate",
    lam: ArrayLike | None = None,
    q: ArrayLike | None = None,
    sigma2_0: ArrayLike | None = None,
    mu_0: ArrayLike | None = None,
    return_trace: bool = False,
    backend: str = "jax",
    dtype: np.dtype | type | str | None = None,
    trajectory_ids: Sequence[str] | None = None,
    chunk_size: int = 1 << 20,
    device: str | None = None,
) -> dict[str, np.ndarray]:
    """SAUCE for many trajectories at once.

    Args:
      agreement, token_entropy: either padded **time-major** arrays ``[T, N]`` (rounds x
        trajectories) with ``round_mask [T, N]`` (bool; default all rounds executed), or
        ragged Python sequences, one sequence of per-round floats per trajectory.
      protocol: preset name, or one per trajectory (``[N]`` strings: a list, NumPy or Arrow
        array) for mixed corpora.
      lam, q, sigma2_0, mu_0: override preset values; each a scalar, an array that
        broadcasts against ``[N]`` (per-trajectory parameters), or a mapping protocol ->
        value (per-protocol parameters; protocols it does not name keep their preset).
      return_trace: also return ``final_mu``, ``final_sigma2``, ``avg_mu``, ``avg_sigma2``,
        ``n_rounds`` (``[N]``) and the per-round ``mu``, ``sigma2``, ``K_t``, ``S_t``,
        ``nu_t`` (``[T, N]``, NaN in rounds that did not execute).
      backend: ``"jax"`` (jitted kernel) or ``"numpy"`` (the NumPy twin).
      dtype: ``float32`` or ``float64``; default float32 for float32 arrays, else float64.
        float64 runs under a scoped ``jax.enable_x64`` and leaves global config alone.
      trajectory_ids: names used in error messages (default: the trajectory index).
      chunk_size: the largest batch handed to the JAX kernel at once (a power of two).
        Smaller batches are padded to a power of two (at least 1024 for short trajectories,
        fewer for long ones: :func:`fastuq.engine.runtime.bucket_size`), then to a multiple
        of the device count, so that the kernel compiles once per bucket, not once per
        batch size.
      device: ``"cpu"``, ``"gpu"`` or ``"auto"``/``None`` (JAX's default backend: a GPU
        when there is one) for the JAX kernel.

    Returns:
      dict of NumPy arrays in ``dtype``: ``score [N]`` (uncertainty; higher = less likely
      correct), plus the trace fields when ``return_trace``.

    Raises:
      ValueError: naming the trajectory, round and field, for missing/NaN measurements,
        mismatched lengths, agreement outside [0, 1], negative entropy, trajectories without
        rounds; or for bad parameters.
    """
    if dtype is not None:
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    if chunk_size < 1 or chunk_size & (chunk_size - 1):
        raise ValueError(f"chunk_size must be a power of two, got {chunk_size}")
    a, h, mask = _as_batch(agreement, token_entropy, round_mask, dtype)
    dtype = a.dtype
    t_max, n = a.shape
    if trajectory_ids is not None and len(trajectory_ids) != n:
        raise ValueError(f"trajectory_ids has {len(trajectory_ids)} names for {n} trajectories")
    validate_rounds(a, h, mask, trajectory_ids)
    overrides = {"lam": lam, "q": q, "sigma2_0": sigma2_0, "mu_0": mu_0}
    est = get_estimator("sauce")
    params = est.param_values(n, protocol, overrides, dtype, trajectory_ids)
    if not return_trace:
        from fastuq.engine.runner import call_kernel

        with device_scope(device):
            out = call_kernel(est, [a, h, mask], {}, params, n=n, dtype=dtype,
                              backend=backend, chunk_size=chunk_size)
        return {"score": out["sauce"]}
    # The trace is SAUCE's own (no registry contract for it): the kernel module's scan with
    # more fields.
    from fastuq.kernels.sauce import SUMMARY_FIELDS, TRACE_FIELDS, SauceParams, sauce_scan_numpy

    fields = ("score",) + SUMMARY_FIELDS[1:] + TRACE_FIELDS
    if backend == "numpy":
        return sauce_scan_numpy(a, h, mask, SauceParams(**params), fields=fields)
    if backend != "jax":
        raise ValueError(f"backend must be 'jax' or 'numpy', got {backend!r}")
    batched = [(a, 1, 0.0), (h, 1, 0.0), (mask, 1, False)]
    batched += [(params[k], 0, 1.0) for k in ("lam", "q", "sigma2_0", "mu_0")]
    with device_scope(device):
        return run_bucketed(_trace_call, batched, n, dtype, chunk_size, fields=fields)


def _trace_call(a, h, mask, lam, q, sigma2_0, mu_0, *, fields):
    """SAUCE's scan with trace fields (a stable function, so wrappers cache)."""
    from fastuq.kernels.sauce import SauceParams, sauce_scan

    return sauce_scan(a, h, mask, SauceParams(lam, q, sigma2_0, mu_0), fields=fields)
