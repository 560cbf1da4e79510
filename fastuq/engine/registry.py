"""The estimator registry: the one place an estimator is declared.

Each entry (:class:`Estimator`) names the packed inputs it reads (catalogued in
:mod:`fastuq.engine.inputs`, which knows the corpus columns behind each one and checks them),
its parameters with defaults, bounds and per-protocol presets, its JAX kernel, NumPy twin
and per-trajectory reference (all three in one kernel module), and its output columns. One
generic runner (:func:`fastuq.engine.runner.run_estimator`) turns a packed chunk into the
kernel call for any entry; ``fastuq score``, :func:`fastuq.score`, :func:`fastuq.sauce_batch`,
sweeps and fitting all reach kernels through it.

The kernel contract, shared by the three implementations::

    kernel(*inputs, **optional_inputs, **params) -> [N] array (one output) or
                                                    {output: [N] array}
    reference(*inputs_of_one_trajectory, **optional_inputs, **params) -> float or {output: float}

``inputs`` come in the declared order (values first, then masks); ``optional_inputs`` are
passed by keyword only when the corpus has them (else the kernel's default, ``None``);
``params`` are keyword arguments, each a scalar or an ``[N]`` array (one value per
trajectory, from the protocol presets). The reference takes one trajectory's slices (the
batch axis removed, padding included: its masks say what is real).

Kernels are named by ``"module:function"`` strings and imported on first use, so that
``import fastuq`` (and ``fastuq --help``) does not import JAX. A user's estimator is
registered with :func:`register` (kernels may then be callables or ``"module:function"``
strings naming any importable module).

The types of an entry (:class:`Param`, :class:`Estimator`) are
:mod:`fastuq.engine.estimator`'s (re-exported here).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from fastuq.engine.estimator import Estimator, Param, finite
from fastuq.engine.inputs import CONFIDENCES, INPUTS
from fastuq.engine.similarity import SIMILARITIES

__all__ = ["ESTIMATORS", "Estimator", "Param", "check_params", "finite", "get_estimator",
           "register", "score_estimator", "score_outputs", "takers", "unregister"]


SAUCE_PRESETS: Mapping[str, Mapping[str, float]] = MappingProxyType(
    {
        "debate": MappingProxyType({"lam": 0.95, "q": 0.10, "sigma2_0": 0.25, "mu_0": 0.0}),
        "dylan": MappingProxyType({"lam": 0.70, "q": 0.001, "sigma2_0": 0.25, "mu_0": 0.0}),
    }
)
SAUCE_PARAMS = (
    Param("lam", low=0.0, high=1.0, doc="forgetting factor"),
    Param("q", low=0.0, doc="process noise"),
    Param("sigma2_0", low=0.0, low_open=True, doc="prior variance"),
    Param("mu_0", doc="prior mean"),
)
CONFIDENCE = Param("confidence", default="msp", choices=CONFIDENCES, kernel=False,
                   doc="node confidence: seq_logprob, per-token mean, or minus node entropy")


BCCS_PARAMS = (
    Param("theta_s", default=2.0 / 3.0, low=0.0, high=1.0,
          doc="BCCS: full consensus needs the support share p_s above this"),
    Param("theta_full", default=0.8, low=0.0, high=1.0,
          doc="BCCS: full consensus needs the belief share p_b above this"),
    Param("theta_partial", default=0.5, low=0.0, high=1.0,
          doc="BCCS: partial consensus needs the belief share p_b above this"),
)


#: How far ``w_h + w_q + w_d`` may be from 1 (float rounding of weights given in decimals).
UAAD_WEIGHT_TOLERANCE = 1e-9


def uaad_constraints(values: Mapping[str, Any], ids: Sequence[str] | None = None) -> None:
    """UAAD's parameters together (DESIGN.md, UAAD): the step-risk weights ``w_h, w_q, w_d``
    sum to 1 (within :data:`UAAD_WEIGHT_TOLERANCE`, or 4 ulps of the weights' float dtype
    where that is coarser: a float32 kernel's rounded weights; each is checked in [0, 1] on
    its own)
    and ``risk_low < risk_high`` (the medium tier is ``risk_low <= risk < risk_high``).
    ``values``: parameter -> a scalar or an ``[N]`` array; ``ids`` name the trajectory of a
    per-trajectory pair that does not fit. Raises ValueError naming the parameters."""
    if all(w in values for w in ("w_h", "w_q", "w_d")):
        given = [np.asarray(values[k]) for k in ("w_h", "w_q", "w_d")]
        dtype = np.result_type(*given)
        # weights rounded to a float32 kernel's dtype sum to 1 within its rounding only
        tol = max(UAAD_WEIGHT_TOLERANCE, 4 * float(np.finfo(dtype).eps)
                  if np.issubdtype(dtype, np.floating) else 0.0)
        w = np.broadcast_arrays(*(x.astype(np.float64) for x in given))
        total = w[0] + w[1] + w[2]
        bad = ~(np.abs(total - 1.0) <= tol)
        if bad.any():
            k = int(np.argmax(bad.reshape(-1)))
            who = ""
            if bad.ndim:
                who = f"trajectory {ids[k]!r}: " if ids is not None else f"trajectory {k}: "
            h, q, d = (float(x.reshape(-1)[k]) for x in w)
            raise ValueError(
                f"{who}uaad: the step-risk weights must sum to 1, got w_h + w_q + w_d = "
                f"{h:g} + {q:g} + {d:g} = {h + q + d:g}")
    if "risk_low" in values and "risk_high" in values:
        low = np.asarray(values["risk_low"], np.float64)
        high = np.asarray(values["risk_high"], np.float64)
        bad = ~(low < high)
        if bad.any():
            low, high, bad = np.broadcast_arrays(low, high, bad)
            k = int(np.argmax(bad.reshape(-1)))
            who = ""
            if bad.ndim:
                who = f"trajectory {ids[k]!r}: " if ids is not None else f"trajectory {k}: "
            raise ValueError(
                f"{who}uaad: risk_low must be below risk_high (the tiers are low < risk_low "
                f"<= medium < risk_high <= high), got risk_low {low.reshape(-1)[k]:g} and "
                f"risk_high {high.reshape(-1)[k]:g}")


UAAD_PARAMS = (
    Param("w_h", default=0.45, low=0.0, high=1.0,
          doc="UAAD: weight of the token entropy h in the step risk"),
    Param("w_q", default=0.35, low=0.0, high=1.0,
          doc="UAAD: weight of the self-inconsistency q in the step risk"),
    Param("w_d", default=0.20, low=0.0, high=1.0,
          doc="UAAD: weight of the cross-agent divergence d in the step risk"),
    Param("entropy_max", default=math.log(5.0), low=0.0, low_open=True,
          doc="UAAD: token entropy (nats) that maps to h = 1 when h is derived"),
    Param("tau_c", default=0.8, low=0.0, high=1.0,
          doc="UAAD: consensus stop needs the dominant share at least this"),
    Param("epsilon", default=0.05, low=0.0, high=1.0,
          doc="UAAD: ... and a change of at most this since the previous round"),
    Param("risk_low", default=0.35, low=0.0,
          doc="UAAD: risks below this are low tier"),
    Param("risk_high", default=0.62, low=0.0,
          doc="UAAD: risks from this up are high tier (between: medium)"),
    Param("agents_low", default=1.0, low=0.0, integer=True,
          doc="UAAD: agents of the low tier"),
    Param("rounds_low", default=1.0, low=0.0, integer=True,
          doc="UAAD: debate-round cap of the low tier"),
    Param("agents_medium", default=3.0, low=0.0, integer=True,
          doc="UAAD: agents of the medium tier"),
    Param("rounds_medium", default=1.0, low=0.0, integer=True,
          doc="UAAD: debate-round cap of the medium tier"),
    Param("agents_high", default=6.0, low=0.0, integer=True,
          doc="UAAD: agents of the high tier"),
    Param("rounds_high", default=3.0, low=0.0, integer=True,
          doc="UAAD: debate-round cap of the high tier"),
)


SIMILARITY = Param("similarity", default="answer", choices=SIMILARITIES, kernel=False,
                   doc="the round's similarity graph: answer-class equality, the "
                       "token-set Jaccard index of the agents' texts (lexical), or their "
                       "ROUGE-L F-measure (rouge_l)")


#: Eccentricity's threshold on the normalised Laplacian's eigenvalues (lm-polygraph's
#: ``thres``): those eigenvalues lie in [0, 2), so a threshold above 2 keeps what 2 keeps
#: and one at or below 0 keeps nothing.
THRESHOLD = Param("threshold", default=0.9, low=0.0, high=2.0, low_open=True,
                  doc="eccentricity: keep the Laplacian eigenvectors with eigenvalue below "
                      "this (lm-polygraph's thres)")


def _spectral(name: str, description: str, inputs=("similarity", "round_mask"),
              params=(SIMILARITY,), optional_inputs=("n_agents",)) -> Estimator:
    """An entry of :mod:`fastuq.kernels.spectral`: the last round's score and its mean
    (``n_agents``: the team of the answer-class form of ``similarity``)."""
    return Estimator(name=name, inputs=inputs, params=params,
                     optional_inputs=optional_inputs,
                     outputs=(name, f"{name}_mean"), scores=(name, f"{name}_mean"),
                     **_kernels("spectral", name),
                     description=description + " (last executed round; also its mean over "
                                               "rounds, <name>_mean)")


def _kernels(module: str, name: str) -> dict[str, str]:
    return {"kernel": f"{module}:{name}", "twin": f"{module}:{name}_numpy",
            "reference": f"{module}:{name}_reference"}


def _rounds(module: str, name: str) -> tuple[str, str]:
    """The per-round kernel and twin (``NAME_rounds``, ``NAME_rounds_numpy``)."""
    return (f"{module}:{name}_rounds", f"{module}:{name}_rounds_numpy")


_BUILTIN = (
    Estimator(
        name="sauce", inputs=("agreement", "token_entropy", "round_mask"),
        params=SAUCE_PARAMS, presets=SAUCE_PRESETS, **_kernels("sauce", "sauce"),
        per_round=_rounds("sauce", "sauce"),
        description="SAUCE lambda-Kalman filter over agreement and token entropy",
    ),
    Estimator(
        name="umas", inputs=("node_confidence", "node_mask"), optional_inputs=("edges",),
        params=(CONFIDENCE,), memory="umas:umas_memory", **_kernels("umas", "umas"),
        per_round=_rounds("umas", "umas"),
        description="UMAS trust-weighted dynamic confidence over the interaction graph",
    ),
    Estimator(
        name="umas_fix", inputs=("node_confidence", "node_mask"), params=(CONFIDENCE,),
        **_kernels("umas", "umas_fix"),
        description="UMAS_FIX: minus the mean static node confidence",
    ),
    Estimator(
        name="msp_final", inputs=("seq_logprob", "node_mask"),
        **_kernels("baselines", "msp_final"),
        description="minus the mean sequence log-probability of the final nodes",
    ),
    Estimator(
        name="perplexity_final", inputs=("seq_logprob", "n_tokens", "node_mask"),
        **_kernels("baselines", "perplexity_final"),
        description="mean perplexity exp(-seq_logprob / n_tokens) of the final nodes",
    ),
    Estimator(
        name="mean_token_entropy", inputs=("node_entropy", "node_mask"),
        **_kernels("baselines", "mean_token_entropy"),
        description="mean over all nodes of the node's mean token entropy (nats)",
    ),
    Estimator(
        name="last_agreement", inputs=("agreement", "round_mask"),
        optional_inputs=("team_size",), **_kernels("baselines", "last_agreement"),
        per_round=_rounds("baselines", "last_agreement"),
        description="minus the agreement of the last executed round",
    ),
    Estimator(
        name="mean_agreement", inputs=("agreement", "round_mask"),
        optional_inputs=("team_size",), **_kernels("baselines", "mean_agreement"),
        per_round=_rounds("baselines", "mean_agreement"),
        description="minus the mean agreement over executed rounds",
    ),
    Estimator(
        name="weighted_agreement", inputs=("agreement", "token_entropy", "round_mask"),
        optional_inputs=("team_size",), **_kernels("baselines", "weighted_agreement"),
        per_round=_rounds("baselines", "weighted_agreement"),
        description="minus the static precision-weighted agreement (weights 1/R_t)",
    ),
    *(Estimator(
        name=name, inputs=("answer_class", "n_agents", "round_mask"),
        **_kernels("answer_sets", name), description=description,
    ) for name, description in (
        ("answer_entropy", "entropy (nats) of the last executed round's answer classes "
                           "(discrete semantic entropy; an agent without an answer is a "
                           "class of its own)"),
        ("answer_entropy_mean", "answer_entropy's mean over executed rounds"),
        ("num_answer_sets", "number of answer classes in the last executed round (an agent "
                            "without an answer is a set of its own)"),
        ("num_answer_sets_mean", "num_answer_sets' mean over executed rounds"),
    )),
    *(Estimator(
        name=name, inputs=("node_confidence", "answer_class", "n_agents", "node_mask"),
        params=(CONFIDENCE,), **_kernels("answer_sets", name), description=description,
    ) for name, description in (
        ("cocoa", "CoCoA: mean over the final round's nodes of -confidence times the share "
                  "of the other agents whose answer differs"),
        ("cocoa_mean", "cocoa's per-round value, mean over rounds with a valid node"),
    )),
    Estimator(
        name="bccs", inputs=("answer_class", "belief", "n_agents", "round_mask"),
        params=BCCS_PARAMS, outputs=("bccs", "bccs_first_full", "bccs_leader"),
        **_kernels("bccs", "bccs"),
        per_round=_rounds("bccs", "bccs"),
        description="BCCS: 1 - p_s p_b of the last round, support share times belief share "
                    "(a lone answering agent is not certainty; also: first full-consensus "
                    "round, last round's leader slot)",
    ),
    Estimator(
        name="sauce_belief",
        inputs=("answer_class", "belief", "token_entropy", "round_mask"),
        params=SAUCE_PARAMS, presets=SAUCE_PRESETS, **_kernels("bccs", "sauce_belief"),
        per_round=_rounds("bccs", "sauce_belief"),
        description="SAUCE filtering BCCS's belief share p_b instead of agreement",
    ),
    Estimator(
        name="uaad",
        inputs=("step_h", "step_q", "step_d", "step_mask", "agreement", "round_mask",
                "n_agents"),
        optional_inputs=("round_entropy", "round_classes"), params=UAAD_PARAMS,
        constraints=uaad_constraints,
        outputs=("uaad", "uaad_max_risk", "uaad_tier", "uaad_stop", "uaad_calls"),
        **_kernels("uaad", "uaad"),
        description="UAAD: the round-0 step risk that routes (also: the largest risk of any "
                    "round, tier 0/1/2, stop round and calls Q = M + N R + 1)",
    ),
    _spectral("lexical_similarity",
              "minus the mean pairwise token-set Jaccard index of the agents' texts",
              inputs=("text_similarity", "round_mask"), params=(), optional_inputs=()),
    _spectral("eigval_laplacian",
              "Lin et al. 2023: sum of max(0, 1 - eigenvalue) of the normalised graph "
              "Laplacian of the round's similarity (with answers: the number of answer sets)"),
    _spectral("degree_matrix",
              "Lin et al. 2023: trace(m I - D) / m^2, one minus the mean similarity of the "
              "round's agents"),
    _spectral("eccentricity",
              "Lin et al. 2023: spread of the agents' Laplacian embeddings (eigenvalues "
              "below threshold, default 0.9)", params=(SIMILARITY, THRESHOLD)),
)

_REGISTRY: dict[str, Estimator] = {est.name: est for est in _BUILTIN}
#: Every registered estimator by name, in registration order (a live, read-only view).
ESTIMATORS: Mapping[str, Estimator] = MappingProxyType(_REGISTRY)


def register(estimator: Estimator, *, replace: bool = False) -> Estimator:
    """Register ``estimator`` so that ``fastuq score --method NAME``, :func:`fastuq.score`,
    ``eval`` and ``select`` run it.

    Checked here: the name is new (unless ``replace``), is not ``"all"``, does not clash with
    an output column of another estimator, its inputs are known packed inputs
    (:data:`fastuq.engine.inputs.INPUTS`), and each parameter is taken by one kind only
    (a parameter name shared with another estimator must mean the same thing: the same
    bounds and choices). Returns the estimator.
    """
    if not isinstance(estimator, Estimator):
        raise TypeError(f"register takes an Estimator, got {type(estimator).__name__}")
    name = estimator.name
    if not name or not name.isidentifier() or name == "all":
        raise ValueError(f"estimator name must be an identifier other than 'all', got {name!r}")
    if name in _REGISTRY and not replace:
        raise ValueError(f"estimator {name!r} is already registered (pass replace=True)")
    unknown = [i for i in (*estimator.inputs, *estimator.optional_inputs) if i not in INPUTS]
    if unknown:
        raise ValueError(f"estimator {name!r}: unknown packed input(s) {unknown}; known: "
                         f"{', '.join(INPUTS)}")
    for other in _REGISTRY.values():
        if other.name == name:
            continue
        clash = set(other.outputs) & set(estimator.outputs)
        if clash:
            raise ValueError(f"estimator {name!r}: output column(s) {sorted(clash)} already "
                             f"written by {other.name!r}")
        for p in estimator.params:
            for q in other.params:
                if p.name == q.name and (p.low, p.high, p.low_open, p.high_open, p.choices,
                                         p.integer, p.kernel) != (
                        q.low, q.high, q.low_open, q.high_open, q.choices, q.integer,
                        q.kernel):
                    raise ValueError(f"estimator {name!r}: parameter {p.name!r} differs from "
                                     f"{other.name!r}'s parameter of that name")
    _REGISTRY[name] = estimator
    return estimator


def unregister(name: str) -> Estimator:
    """Remove a registered estimator (KeyError-free: ValueError naming the known ones)."""
    est = get_estimator(name)
    del _REGISTRY[name]
    return est


def get_estimator(name: str) -> Estimator:
    """The registry entry called ``name``; ValueError listing the known names otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown estimator {name!r}; known: {', '.join(sorted(_REGISTRY))}"
        ) from None


def score_outputs(columns: Iterable[str]) -> list[str]:
    """The columns among ``columns`` (in their order) that a registered estimator declares
    as scores (:attr:`Estimator.scores`): the columns ``fastuq eval`` and ``fastuq report``
    evaluate, e.g. ``eigval_laplacian`` and ``eigval_laplacian_mean``, not ``uaad_tier``."""
    known = {c for est in _REGISTRY.values() for c in est.scores}
    return [c for c in columns if c in known]


def score_estimator(column: str) -> str | None:
    """The name of the registered estimator that declares ``column`` among its scores
    (:attr:`Estimator.scores`; ``"eigval_laplacian"`` for ``eigval_laplacian_mean``), or
    None when no registered estimator does."""
    return next((name for name, est in _REGISTRY.items() if column in est.scores), None)


def takers(param: str) -> list[str]:
    """Estimators that take the parameter ``param``, in registry order."""
    return [name for name, est in _REGISTRY.items() if param in est.param_names]


def check_params(params: Mapping[str, object], methods=None) -> None:
    """Refuse estimator parameters that would be ignored or that no run could use, before
    any record is read.

    Args:
      params: parameter name -> value (``None`` values are not given and not checked); a
        value is a scalar, or a mapping protocol -> scalar (each checked), or an array (one
        per trajectory, checked when it is scored).
      methods: the estimators that will run (``None``: not known yet; the values are
        checked against every estimator that takes them).

    Raises:
      TypeError: a name no estimator takes (naming it, a close match, and the known ones).
      ValueError: a parameter none of ``methods`` takes (naming the estimators that do); a
        value outside its parameter's range; scalar values that do not fit together under
        an estimator's ``constraints`` (the others at their defaults), e.g. UAAD's
        ``risk_low >= risk_high`` or weights that do not sum to 1.
    """
    _check_names(params, methods)
    runs = [est for name, est in _REGISTRY.items() if methods is None or name in methods]
    for est in runs:
        scalars: dict[str, Any] = {}
        for p in est.params:
            value = params.get(p.name)
            if value is None:
                if p.default is not None:
                    scalars[p.name] = p.default
                continue
            if isinstance(value, Mapping):
                for proto, v in value.items():
                    try:
                        p.check(v)
                    except ValueError as exc:
                        raise ValueError(f"{exc} (protocol {proto!r})") from None
            elif np.ndim(value) == 0:  # type: ignore[arg-type]
                scalars[p.name] = p.check(value)
        if est.constraints is not None:
            given = {k for k, v in params.items() if v is not None and k in est.param_names}
            if given:  # the defaults alone are the estimator's own business
                est.constraints(scalars, None)


def _check_names(params: Mapping[str, object], methods) -> None:
    """The name checks of :func:`check_params`."""
    import difflib

    known = sorted({p for est in _REGISTRY.values() for p in est.param_names})
    for name, value in params.items():
        if value is None:
            continue
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            listing = "; ".join(f"{p} ({', '.join(takers(p))})" for p in known)
            raise TypeError(f"unknown estimator parameter {name!r}{hint}; known: {listing}")
        if methods is not None and not any(name in _REGISTRY[m].param_names for m in methods
                                           if m in _REGISTRY):
            raise ValueError(
                f"parameter {name!r} would be ignored: it is taken by "
                f"{', '.join(takers(name))}, none of which is among the methods "
                f"({', '.join(methods) or 'none'})"
            )
