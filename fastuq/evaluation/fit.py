"""Gradient-based fitting of SAUCE's parameters (lam, q, sigma2_0, mu_0) to labelled rollouts.

>>> from fastuq.evaluation.fit import fit_sauce
>>> result = fit_sauce("rollouts.parquet", objective="platt_logloss", folds=5)
>>> print(result.summary())                 # held-out AUROC/AUARC, fitted vs presets
>>> fastuq.sauce_batch(a, h, mask, **result.sauce_kwargs("debate"))
>>> result.save("params.json")

Method. Gradients flow through the jitted SAUCE filter (``jax.grad`` through its
``lax.scan`` over rounds). Constraints hold by construction through the parametrisation::

    lam = sigmoid(a),   q = softplus(b),   sigma2_0 = softplus(c) + 1e-12,   mu_0 = d

so ``lam`` stays in [0, 1], ``q >= 0`` and ``sigma2_0 > 0`` whatever the optimiser does.
The optimiser is plain Adam (a few lines of JAX, no optax), on minibatches, with a cosine
learning-rate decay to a tenth of ``lr``; all steps run inside one jitted ``lax.scan``.

Objectives (both minimised, both differentiable in the four parameters):

* ``"platt_logloss"`` -- the log-loss of a one-feature logistic regression (Platt scaling) of
  ``correct`` on the score, ``P(correct) = sigmoid(alpha + beta * score)``, its two
  parameters optimised jointly with SAUCE's. They start at the maximum-likelihood Platt fit
  (:func:`fastuq.metrics.platt.platt_fit`, Newton's method) on the starting scores, and are
  refitted the same way on the final scores.
* ``"soft_auroc"`` -- ``1 - AUROC`` made smooth: the mean over (correct i, wrong j) pairs of
  ``sigmoid((s_i - s_j) / (tau * sd))``, with the scores standardised by their standard
  deviation ``sd`` (so the loss cannot shrink by rescaling scores). Each step draws
  ``pairs`` correct and ``pairs`` wrong trajectories and takes all ``pairs**2`` cross
  pairs: memory is ``O(pairs**2)``, not ``O(N**2)``.

Evaluation. With ``folds=k`` each fold is held out in turn: the parameters are fitted on the
other folds and the fold's exact AUROC / AUARC (:mod:`fastuq.metrics`) are reported for the
fitted parameters and the protocol presets side by side; the returned parameters are then
fitted on all trajectories. Without folds, a stratified ``holdout`` fraction is held out
and the returned parameters are those fitted on the rest (``holdout=0``: fit on everything,
no held-out report). Mixed corpora are fitted per protocol: each protocol's parameters (and
Platt coefficients) on its own trajectories.

Precision: float32 by default (ample for ranking); ``dtype="float64"`` runs the whole fit
under a scoped ``jax.enable_x64(True)``, never a global switch. JAX is imported on first use.

Why one module over 600 lines: the parametrisation, the jitted trainer and the fold loop
around it are one procedure whose private pieces serve :func:`fit_sauce` alone; the inputs
it reads are :mod:`fastuq.evaluation.sauce_data`'s.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fastuq.evaluation.sauce_data import PARAMS, SauceData, load_sauce_data
from fastuq.evaluation.sweeps import check_protocol_params
from fastuq.metrics.folds import stratified_folds
from fastuq.metrics.platt import PlattConvergenceWarning, platt_fit

__all__ = ["OBJECTIVES", "FitResult", "fit_sauce", "load_params", "per_parameter"]

#: Objectives :func:`fit_sauce` minimises.
OBJECTIVES = ("platt_logloss", "soft_auroc")

#: Bounds on the unconstrained parameters (a, b, c, d[, alpha, beta]) keeping float32 sane.
_LOW = np.array([-15.0, -20.0, -20.0, -10.0, -1e3, -1e3])
_HIGH = np.array([15.0, 5.0, 5.0, 10.0, 1e3, 1e3])
_S2_EPS = 1e-12

ArrayLike = Any


@dataclass
class FitResult:
    """What :func:`fit_sauce` found.

    params: protocol -> ``{"lam", "q", "sigma2_0", "mu_0"}`` fitted values (floats).
    init: protocol -> the starting values.
    platt: protocol -> ``(alpha, beta)`` of ``P(correct) = sigmoid(alpha + beta * score)``
      on the fitted scores (refitted by Newton's method; for every objective).
    train_objective: protocol -> ``(start, end)`` of the objective on the training
      trajectories of the returned fit (``platt_logloss``: exact over all of them;
      ``soft_auroc``: over a fixed sample of pairs).
    history: protocol -> ``[steps]`` minibatch objective per Adam step.
    heldout: a Polars DataFrame, one row per (split, protocol), ``protocol == "all"`` pooling
      every protocol: ``split`` (fold index, or 0 for the single held-out part), ``n``,
      ``auroc_fitted``, ``auroc_preset``, ``auarc_fitted``, ``auarc_preset`` (exact;
      preset columns null where a protocol has no preset); ``None`` with ``holdout=0``.
    settings: the arguments of the fit (objective, steps, lr, ...).
    """

    objective: str
    params: dict[str, dict[str, float]]
    init: dict[str, dict[str, float]]
    platt: dict[str, tuple[float, float]]
    train_objective: dict[str, tuple[float, float]]
    history: dict[str, np.ndarray] = field(repr=False)
    heldout: Any = None
    settings: dict[str, Any] = field(default_factory=dict)

    def sauce_kwargs(self, protocol: str | None = None) -> dict[str, float]:
        """Keyword arguments for :func:`fastuq.sauce_batch` (``lam=...``, ...) of
        ``protocol`` (may be omitted when one protocol was fitted)."""
        if protocol is None:
            if len(self.params) != 1:
                raise ValueError(f"several protocols were fitted ({sorted(self.params)}); "
                                 "name one")
            protocol = next(iter(self.params))
        if protocol not in self.params:
            raise ValueError(f"no parameters fitted for protocol {protocol!r}; "
                             f"fitted: {sorted(self.params)}")
        return dict(self.params[protocol])

    def heldout_mean(self) -> dict[str, dict[str, float]]:
        """protocol -> mean over splits of each held-out metric column."""
        if self.heldout is None:
            return {}
        import polars as pl

        cols = ["auroc_fitted", "auroc_preset", "auarc_fitted", "auarc_preset"]
        means = self.heldout.group_by("protocol", maintain_order=True).agg(
            [pl.col(c).mean() for c in cols] + [pl.col("n").sum()]
        )
        return {row["protocol"]: {k: row[k] for k in (*cols, "n")}
                for row in means.iter_rows(named=True)}

    def summary(self) -> str:
        """A human-readable report: parameters, training objective, held-out metrics."""
        lines = [f"SAUCE fit ({self.objective}, {self.settings.get('steps')} Adam steps, "
                 f"lr {self.settings.get('lr')})"]
        for proto, p in self.params.items():
            start, end = self.train_objective[proto]
            init = self.init[proto]
            lines.append(
                f"  {proto}: lam {p['lam']:.4g}  q {p['q']:.4g}  sigma2_0 {p['sigma2_0']:.4g}  "
                f"mu_0 {p['mu_0']:.4g}   (start: lam {init['lam']:.4g}  q {init['q']:.4g}  "
                f"sigma2_0 {init['sigma2_0']:.4g}  mu_0 {init['mu_0']:.4g}); "
                f"training {self.objective} {start:.5f} -> {end:.5f}"
            )
        means = self.heldout_mean()
        if means:
            split = self.settings.get("folds")
            how = f"{split}-fold cross-validation" if split else (
                f"held-out {self.settings.get('holdout'):.0%}")
            lines.append(f"held-out metrics ({how}): fitted vs preset")
            for proto, m in means.items():
                lines.append(
                    f"  {proto:<12} n {int(m['n']):>9,}  AUROC {m['auroc_fitted']:.4f} vs "
                    f"{_fmt(m['auroc_preset'])}   AUARC {m['auarc_fitted']:.4f} vs "
                    f"{_fmt(m['auarc_preset'])}"
                )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready content: parameters, Platt coefficients, objectives, held-out rows."""
        return {
            "estimator": "sauce",
            "objective": self.objective,
            "params": self.params,
            "init": self.init,
            "platt": {k: {"alpha": v[0], "beta": v[1]} for k, v in self.platt.items()},
            "train_objective": {k: {"start": v[0], "end": v[1]}
                                for k, v in self.train_objective.items()},
            "heldout": None if self.heldout is None else self.heldout.to_dicts(),
            "heldout_mean": self.heldout_mean(),
            "settings": self.settings,
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write :meth:`to_dict` as JSON, atomically (temporary file, then rename)."""
        from fastuq.io.writers import atomic_write_json

        path = Path(path)
        atomic_write_json(path, self.to_dict())
        return path


def _fmt(value: float | None) -> str:
    return "   —  " if value is None or not math.isfinite(value) else f"{value:.4f}"


#: Top-level keys of the JSON :meth:`FitResult.save` writes.
_FILE_KEYS = ("estimator", "objective", "params", "init", "platt", "train_objective",
              "heldout", "heldout_mean", "settings")


def load_params(path: str | os.PathLike) -> dict[str, dict[str, float]]:
    """Per-protocol SAUCE parameters from a ``fastuq fit -o`` file: protocol -> ``{name:
    value}`` with names from ``lam``, ``q``, ``sigma2_0``, ``mu_0``.

    The file is what :meth:`FitResult.save` writes (only ``"params"`` is required, so a
    hand-written ``{"params": {"debate": {"lam": 0.9}}}`` works too); a protocol may give a
    subset of the parameters (the rest come from its preset when applied). Raises
    ValueError, naming the file and key, for invalid JSON, unknown top-level keys, a
    non-SAUCE estimator, unknown parameter names, and values that are not finite numbers or
    out of range (lam in [0, 1], q >= 0, sigma2_0 > 0).
    """
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object with a 'params' key")
    unknown = [k for k in doc if k not in _FILE_KEYS]
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {unknown}; a fit file has "
                         f"{list(_FILE_KEYS)}")
    if doc.get("estimator", "sauce") != "sauce":
        raise ValueError(f"{path}: parameters of {doc['estimator']!r}; only sauce is supported")
    return check_protocol_params(doc.get("params"), f"{path}: ")


def per_parameter(per_protocol: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """``protocol -> {name: value}`` turned into ``name -> {protocol: value}``: the form
    :func:`fastuq.sauce_batch` and :func:`fastuq.score` take for per-protocol parameters
    (``lam={"debate": 0.9, "dylan": 0.7}``)."""
    out: dict[str, dict[str, float]] = {}
    for proto, values in per_protocol.items():
        for k, v in values.items():
            out.setdefault(k, {})[proto] = float(v)
    return out


# --------------------------------------------------------------------------- parametrisation


def _softplus_inv(y: float) -> float:
    return float(y + math.log(-math.expm1(-y)))  # log(exp(y) - 1), stable for large y


def _to_raw(p: Mapping[str, float]) -> np.ndarray:
    lam = min(max(float(p["lam"]), 1e-6), 1 - 1e-6)
    q = max(float(p["q"]), 1e-8)
    s2 = max(float(p["sigma2_0"]) - _S2_EPS, 1e-8)
    raw = np.array([math.log(lam / (1 - lam)), _softplus_inv(q), _softplus_inv(s2),
                    float(p["mu_0"])])
    return np.clip(raw, _LOW[:4], _HIGH[:4])


def _from_raw(raw: np.ndarray) -> dict[str, float]:
    a, b, c, d = (float(v) for v in raw[:4])
    return {
        "lam": 1.0 / (1.0 + math.exp(-a)),
        "q": float(np.logaddexp(0.0, b)),
        "sigma2_0": float(np.logaddexp(0.0, c)) + _S2_EPS,
        "mu_0": d,
    }


def _platt(scores: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Maximum-likelihood ``(alpha, beta)`` of ``P(y) = sigmoid(alpha + beta s)`` for scores
    ``[N]`` and labels ``y [N]`` bool (both classes): :func:`fastuq.metrics.platt.platt_fit`
    unpenalised, clipped to the bounds of the Adam parameters (where separable scores, with
    no finite maximum, end up)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PlattConvergenceWarning)
        alpha, beta = platt_fit(np.asarray(y, bool), np.asarray(scores)[:, None], C=None)
    return (float(np.clip(alpha[0], _LOW[4], _HIGH[4])),
            float(np.clip(beta[0], _LOW[5], _HIGH[5])))


def _logloss(scores: np.ndarray, y: np.ndarray, alpha: float, beta: float) -> float:
    z = alpha + beta * np.asarray(scores, np.float64)
    return float(np.mean(np.logaddexp(0.0, z) - y * z))


def _soft_auroc_np(sp: np.ndarray, sn: np.ndarray, tau: float) -> float:
    s = np.concatenate([sp, sn]).astype(np.float64)
    sd = s.std() + 1e-12
    d = (sp.astype(np.float64)[:, None] - sn.astype(np.float64)[None, :]) / (tau * sd)
    return float(np.mean(0.5 * (1.0 + np.tanh(0.5 * d))))  # sigmoid, overflow-free


# --------------------------------------------------------------------------- JAX training


_TRAINERS: dict = {}


def _trainer(objective: str):
    """The jitted Adam loop for ``objective`` (built on first use, so import stays JAX-free)."""
    if objective in _TRAINERS:
        return _TRAINERS[objective]
    from functools import partial

    import jax
    import jax.numpy as jnp
    from jax import lax

    from fastuq.engine.registry import get_estimator

    kernel = get_estimator("sauce").kernel_fn("jax")

    def score(raw, a, h, m):
        dtype = a.dtype
        return kernel(a, h, m, lam=jax.nn.sigmoid(raw[0]), q=jax.nn.softplus(raw[1]),
                      sigma2_0=jax.nn.softplus(raw[2]) + jnp.asarray(_S2_EPS, dtype),
                      mu_0=raw[3])

    def take(x, idx):
        return jnp.take(x, idx, axis=1)

    def platt_loss(raw, batch):
        a, h, m, y = batch
        z = raw[4] + raw[5] * score(raw, a, h, m)
        return jnp.mean(jax.nn.softplus(z) - y * z)

    def auroc_loss(raw, batch, tau):
        ap, hp, mp, an, hn, mn = batch
        sp = score(raw, ap, hp, mp)
        sn = score(raw, an, hn, mn)
        sd = jnp.std(jnp.concatenate([sp, sn])) + 1e-12
        return jnp.mean(jax.nn.sigmoid((sp[:, None] - sn[None, :]) / (tau * sd)))

    @partial(jax.jit, static_argnames=("steps", "batch"))
    def train(raw0, a, h, m, y, pos, neg, counts, key, lr, tau, low, high, *, steps, batch):
        """Adam over ``steps`` minibatches. ``pos``/``neg``: padded index arrays of the
        correct / wrong training rows, ``counts = (n_rows, n_pos, n_neg)``."""
        b1, b2, eps = 0.9, 0.999, 1e-8
        dtype = raw0.dtype

        def step(carry, t):
            raw, m1, m2, key = carry
            key, k1, k2 = jax.random.split(key, 3)
            if objective == "platt_logloss":
                idx = jax.random.randint(k1, (batch,), 0, counts[0])
                data = (take(a, idx), take(h, idx), take(m, idx), jnp.take(y, idx))
                loss, g = jax.value_and_grad(platt_loss)(raw, data)
            else:
                ip = jnp.take(pos, jax.random.randint(k1, (batch,), 0, counts[1]))
                ineg = jnp.take(neg, jax.random.randint(k2, (batch,), 0, counts[2]))
                data = (take(a, ip), take(h, ip), take(m, ip),
                        take(a, ineg), take(h, ineg), take(m, ineg))
                loss, g = jax.value_and_grad(auroc_loss)(raw, data, tau)
            g = jnp.where(jnp.isfinite(g), g, 0.0)
            tf = t.astype(dtype)
            rate = lr * (0.1 + 0.45 * (1.0 + jnp.cos(jnp.pi * tf / steps)))
            m1 = b1 * m1 + (1 - b1) * g
            m2 = b2 * m2 + (1 - b2) * g * g
            mhat = m1 / (1 - b1 ** (tf + 1))
            vhat = m2 / (1 - b2 ** (tf + 1))
            raw = jnp.clip(raw - rate * mhat / (jnp.sqrt(vhat) + eps), low, high)
            return (raw, m1, m2, key), loss

        zeros = jnp.zeros_like(raw0)
        (raw, _, _, _), losses = lax.scan(step, (raw0, zeros, zeros, key), jnp.arange(steps))
        return raw, losses

    _TRAINERS[objective] = train
    return train


def _scores(data: SauceData, params: Mapping[str, Any], dtype: np.dtype) -> np.ndarray:
    """SAUCE scores ``[N]`` of ``data`` with ``params`` (scalars or ``[N]`` arrays)."""
    from fastuq.engine.sauce import sauce_batch

    return sauce_batch(
        data.agreement, data.token_entropy, data.round_mask, dtype=dtype,
        **{p: params[p] for p in PARAMS},
    )["score"]


def _fit_one(
    data: SauceData,
    init: Mapping[str, float],
    objective: str,
    *,
    steps: int,
    lr: float,
    batch_size: int | None,
    pairs: int,
    tau: float,
    seed: int,
    dtype: np.dtype,
    name: str,
    split: str = "",
) -> tuple[dict[str, float], tuple[float, float], tuple[float, float], np.ndarray]:
    """Fit one protocol's parameters on ``data``: ``(params, platt, (start, end), history)``.
    ``split`` names the fit in messages (``"fold 2 of 5"``, ``"final fit"``)."""
    who = f"protocol {name!r}" + (f", {split}" if split else "")
    import jax
    import jax.numpy as jnp

    from fastuq.engine.runtime import bucket_size

    y = data.labels
    n = data.n
    n_pos = int(y.sum())
    if n_pos == 0 or n_pos == n:
        raise ValueError(f"{who}: the training trajectories are all "
                         f"{'correct' if n_pos else 'wrong'}; cannot fit")
    s_start = _scores(data, init, dtype)
    platt0 = _platt(s_start, y)
    rng = np.random.default_rng([seed, 1])
    pos_rows, neg_rows = np.flatnonzero(y), np.flatnonzero(~y)
    eval_pos = rng.choice(pos_rows, min(pos_rows.size, 2048), replace=False)
    eval_neg = rng.choice(neg_rows, min(neg_rows.size, 2048), replace=False)

    def objective_value(scores: np.ndarray, platt: tuple[float, float]) -> float:
        if objective == "platt_logloss":
            return _logloss(scores, y, *platt)
        return _soft_auroc_np(scores[eval_pos], scores[eval_neg], tau)

    start = objective_value(s_start, platt0)
    raw0 = _to_raw(init)
    width = bucket_size(n, 1 << 30)  # padded widths: one compilation per size bucket
    if objective == "platt_logloss":
        raw0 = np.concatenate([raw0, platt0])
        batch = int(min(width, batch_size or 16384))  # drawn with replacement
    else:
        batch = int(pairs)
    low, high = _LOW[: raw0.size], _HIGH[: raw0.size]
    pad = width - n

    def padded(x: np.ndarray, fill) -> np.ndarray:
        return np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, pad)], constant_values=fill)

    def padded_idx(rows: np.ndarray) -> np.ndarray:
        return np.pad(rows, (0, width - rows.size)).astype(np.int32)

    train = _trainer(objective)
    raw, losses = train(
        jnp.asarray(raw0, dtype), jnp.asarray(padded(data.agreement, 0)),
        jnp.asarray(padded(data.token_entropy, 0)), jnp.asarray(padded(data.round_mask, False)),
        jnp.asarray(padded(y.astype(dtype), 0)), jnp.asarray(padded_idx(pos_rows)),
        jnp.asarray(padded_idx(neg_rows)),
        jnp.asarray([n, pos_rows.size, neg_rows.size], np.int32), jax.random.key(seed),
        jnp.asarray(lr, dtype), jnp.asarray(tau, dtype), jnp.asarray(low, dtype),
        jnp.asarray(high, dtype), steps=int(steps), batch=batch,
    )
    raw = np.asarray(raw, np.float64)
    params = _from_raw(raw)
    s_end = _scores(data, params, dtype)
    if not np.isfinite(s_end).all():
        params, s_end = dict(init), s_start
    platt = _platt(s_end, y)
    end = objective_value(s_end, platt)
    if not end <= start:
        warnings.warn(
            f"{who}: the fit did not improve the training {objective} "
            f"({start:.6g} -> {end:.6g}); keeping the starting parameters (try a smaller lr "
            "or more steps)", RuntimeWarning, stacklevel=3,
        )
        params, platt, end = dict(init), platt0, start
    return params, platt, (start, end), np.asarray(losses, np.float64)


# --------------------------------------------------------------------------- public API


def _resolve_init(init: Any, data: SauceData) -> dict[str, dict[str, float]]:
    from fastuq.engine.registry import SAUCE_PRESETS

    out = {}
    for proto in data.protocols:
        if isinstance(init, str):
            if init != "preset":
                raise ValueError(f"init must be 'preset' or a dict of parameters, got {init!r}")
            if proto not in SAUCE_PRESETS:
                raise ValueError(f"protocol {proto!r} has no preset; pass init={{'lam': ..., "
                                 "'q': ..., 'sigma2_0': ..., 'mu_0': ...}")
            p = dict(SAUCE_PRESETS[proto])
        elif isinstance(init, Mapping):
            src = init.get(proto, init) if all(isinstance(v, Mapping) for v in init.values()) \
                else init
            if not isinstance(src, Mapping):
                raise ValueError(f"init has no entry for protocol {proto!r}")
            missing = [k for k in PARAMS if k not in src]
            if missing:
                base = SAUCE_PRESETS.get(proto)
                if base is None:
                    raise ValueError(f"init lacks {missing} and protocol {proto!r} has no preset")
                src = {**base, **src}
            p = {k: float(src[k]) for k in PARAMS}
        else:
            raise ValueError(f"init must be 'preset' or a dict of parameters, got {init!r}")
        if not 0 <= p["lam"] <= 1 or p["q"] < 0 or p["sigma2_0"] <= 0:
            raise ValueError(f"init for {proto!r} out of range: {p}")
        out[proto] = {k: float(p[k]) for k in PARAMS}
    return out


def _param_arrays(data: SauceData, per_proto: Mapping[str, Mapping[str, float]]):
    """Per-trajectory parameter arrays ``[N]`` from per-protocol values."""
    table = np.array([[per_proto[proto][k] for k in PARAMS] for proto in data.protocols])
    return {k: np.take(table[:, i], data.protocol_codes) for i, k in enumerate(PARAMS)}


def _evaluate(test: SauceData, fitted, dtype: np.dtype, split: int) -> list[dict[str, Any]]:
    """Held-out rows (pooled and per protocol) for fitted vs preset parameters."""
    from fastuq.engine.registry import SAUCE_PRESETS
    from fastuq.metrics import auarc, auroc

    s_fit = _scores(test, _param_arrays(test, fitted), dtype)
    has_preset = all(p in SAUCE_PRESETS for p in test.protocols)
    s_pre = _scores(test, test.presets(), dtype) if has_preset else None
    groups = [("all", np.ones(test.n, bool))]
    if len(test.protocols) > 1:
        groups += [(p, test.protocol_codes == k) for k, p in enumerate(test.protocols)]
    rows = []
    for name, rows_mask in groups:
        y = test.labels[rows_mask]
        row: dict[str, Any] = {"split": split, "protocol": name, "n": int(rows_mask.sum())}
        cols = [s_fit[rows_mask]] + ([] if s_pre is None else [s_pre[rows_mask]])
        x = np.stack(cols, axis=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ar = np.atleast_1d(auroc(y, x)) if y.size else np.full(len(cols), np.nan)
            ac = np.atleast_1d(auarc(y, x)) if y.size else np.full(len(cols), np.nan)
        row["auroc_fitted"], row["auarc_fitted"] = float(ar[0]), float(ac[0])
        row["auroc_preset"] = float(ar[1]) if s_pre is not None else None
        row["auarc_preset"] = float(ac[1]) if s_pre is not None else None
        rows.append(row)
    return rows


def _fit_all(data: SauceData, inits, objective, opts, dtype, tick=None, split: str = ""
             ) -> tuple:
    """Every protocol's fit on ``data``; ``split`` names the fit in warnings and errors."""
    params, platt, objs, hist = {}, {}, {}, {}
    for k, proto in enumerate(data.protocols):
        rows = data.protocol_codes == k
        sub = data if len(data.protocols) == 1 else data.subset(rows)
        p, pl_, ob, h = _fit_one(sub, inits[proto], objective, dtype=dtype, name=proto,
                                 split=split, **opts)
        params[proto], platt[proto], objs[proto], hist[proto] = p, pl_, ob, h
        if tick is not None:
            tick()
    return params, platt, objs, hist


def fit_sauce(
    corpus_or_arrays: ArrayLike,
    *,
    objective: str = "platt_logloss",
    init: str | Mapping[str, Any] = "preset",
    steps: int = 300,
    lr: float = 0.05,
    folds: int | None = None,
    holdout: float = 0.2,
    seed: int = 0,
    protocol: str | Sequence[str] | None = None,
    labels: ArrayLike | None = None,
    dtype: str | np.dtype = "float32",
    batch_size: int | None = None,
    pairs: int = 1024,
    tau: float = 0.1,
    observation_noise: float | None = None,
    on_error: str = "raise",
    skipped: list | None = None,
    progress: Callable[[int, int | None], None] | None = None,
) -> FitResult:
    """Fit SAUCE's ``(lam, q, sigma2_0, mu_0)`` per protocol by gradient descent.

    Args:
      corpus_or_arrays: a labelled corpus file, table, arrays ``(agreement [T, N],
        token_entropy [T, N], round_mask [T, N], labels [N])``, or the
        :class:`~fastuq.sweeps.SauceData` that :func:`fastuq.sweeps.load_sauce_data` returns.
      objective: ``"platt_logloss"`` or ``"soft_auroc"`` (module doc).
      init: ``"preset"`` (each protocol's preset) or a dict of starting values (for every
        protocol, or protocol -> dict); missing names come from the preset.
      steps: Adam steps per fit; lr: peak learning rate (on the unconstrained parameters),
        decayed by a cosine to ``lr / 10``.
      folds: ``k`` for k-fold cross-validated held-out metrics (then a final fit on all
        data); holdout: otherwise the stratified held-out fraction (0: none).
      seed: seeds the splits, the minibatches and the evaluation pairs.
      protocol: preset for every trajectory (default: the corpus' ``protocol`` column).
      labels: ``[N]`` correctness labels overriding the corpus' ``correct``.
      dtype: ``"float32"`` or ``"float64"`` (scoped x64).
      batch_size: trajectories per step for ``platt_logloss`` (default ``min(N, 16384)``).
      pairs: correct and wrong trajectories drawn per ``soft_auroc`` step (``pairs**2``
        pairs).
      tau: temperature of the ``soft_auroc`` sigmoid, in standard deviations of the scores.
      observation_noise, on_error, skipped: as :func:`fastuq.sweeps.load_sauce_data`
        (constant R_t for corpora without token entropy; skip bad records into
        ``skipped``).
      progress: called as ``progress(fits_done, fits_total)`` after each protocol's fit
        (``folds`` + 1 fits per protocol with folds, 2 with a held-out part, else 1).

    Returns:
      a :class:`FitResult`.

    Raises:
      ValueError: bad arguments, data (see :func:`~fastuq.sweeps.load_sauce_data`), or a
        protocol whose training trajectories hold a single class.
    """
    from fastuq.engine.runtime import x64_scope

    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    if int(steps) != steps or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be positive, got {lr!r}")
    if not 0 <= holdout < 1:
        raise ValueError(f"holdout must be in [0, 1), got {holdout!r}")
    if pairs < 1 or (batch_size is not None and batch_size < 1):
        raise ValueError("pairs and batch_size must be positive")
    if not tau > 0:
        raise ValueError(f"tau must be positive, got {tau!r}")
    dtype = np.dtype(dtype)
    data = load_sauce_data(corpus_or_arrays, protocol=protocol, labels=labels, dtype=dtype,
                           observation_noise=observation_noise, on_error=on_error,
                           skipped=skipped)
    inits = _resolve_init(init, data)
    opts = {"steps": int(steps), "lr": float(lr), "batch_size": batch_size, "pairs": int(pairs),
            "tau": float(tau), "seed": int(seed)}
    rows: list[dict[str, Any]] = []
    n_fits = len(data.protocols) * (int(folds) + 1 if folds is not None else
                                    2 if holdout > 0 else 1)
    done = [0]

    def tick() -> None:
        done[0] += 1
        if progress is not None:
            progress(done[0], n_fits)

    with x64_scope(dtype):
        if folds is not None:
            fold = stratified_folds(data.labels, folds, seed)
            for f in range(int(folds)):
                params, *_ = _fit_all(data.subset(fold != f), inits, objective, opts, dtype,
                                      tick, f"fold {f} of {int(folds)} (fitted on the others)")
                rows += _evaluate(data.subset(fold == f), params, dtype, f)
            fit_data = data
            final = "final fit on all trajectories"
        elif holdout > 0:
            test = _holdout_rows(data.labels, holdout, seed)
            fit_data = data.subset(~test)
            params, *_ = _fit_all(fit_data, inits, objective, opts, dtype, tick,
                                  "held-out split's training part")
            rows += _evaluate(data.subset(test), params, dtype, 0)
            final = "final fit on the training part"
        else:
            fit_data = data
            final = ""
        params, platt, objs, hist = _fit_all(fit_data, inits, objective, opts, dtype, tick,
                                             final)
    heldout = None
    if rows:
        import polars as pl

        heldout = pl.DataFrame(rows, schema={
            "split": pl.Int64, "protocol": pl.String, "n": pl.Int64,
            "auroc_fitted": pl.Float64, "auarc_fitted": pl.Float64,
            "auroc_preset": pl.Float64, "auarc_preset": pl.Float64,
        }).select("split", "protocol", "n", "auroc_fitted", "auroc_preset", "auarc_fitted",
                  "auarc_preset")
    settings = {"objective": objective, "steps": int(steps), "lr": float(lr), "folds": folds,
                "holdout": 0.0 if folds is not None else float(holdout), "seed": int(seed),
                "dtype": str(dtype), "batch_size": batch_size, "pairs": int(pairs),
                "tau": float(tau), "n": data.n, "protocols": list(data.protocols)}
    return FitResult(objective, params, inits, platt, objs, hist, heldout, settings)


def _holdout_rows(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """A stratified held-out mask ``[N]`` holding ``fraction`` of each class."""
    rng = np.random.default_rng([seed, 2])
    test = np.zeros(labels.shape[0], bool)
    for cls in (True, False):
        rows = np.flatnonzero(labels == cls)
        if rows.size < 2:
            raise ValueError(f"a held-out split needs at least 2 {'correct' if cls else 'wrong'}"
                             f" trajectories, got {rows.size}")
        k = min(max(int(round(fraction * rows.size)), 1), rows.size - 1)
        test[rng.choice(rows, k, replace=False)] = True
    return test
