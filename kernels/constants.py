"""Numerical constants the kernels share, defined once (importing this does not import JAX,
so the scalar API in ``fastuq`` uses them too)."""

#: Floor on the round token entropy: the measurement noise is ``R_t = max(H_t, 1e-8)``
#: (SAUCE, and the weights of ``weighted_agreement``).
ENTROPY_FLOOR = 1e-8
#: Added to ``R_t`` in SAUCE's gain denominator ``S_t = P + R_t + 1e-8``.
GAIN_EPS = 1e-8
#: Floor on SAUCE's posterior variance.
VARIANCE_FLOOR = 1e-15
