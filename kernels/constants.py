"""Numerical constants the kernels share, defined once (importing this does not import JAX,
so the scalar API in ``fastuq`` uses them too)."""

#: Floor on the round token entropy: the measurement noise is ``R_t = max(H_t, 1e-8)``
#: (SAUCE, and the weights of ``weighted_agreement``).
ENTROPY_FLOOR = 1e-8
#: Added to ``R_t`` in SAUCE's gain denominator ``S_t = P + R_t + 1e-8``.
GAIN_EPS = 1e-8
#: Floor on SAUCE's posterior variance.
VARIANCE_FLOOR = 1e-15

#: XLA compile options of the jitted SAUCE kernel and of the wrappers that host fastuq's
#: kernels (``fastuq.engine.runtime.per_device``, the sweep's vmapped scorer); pass them to
#: ``jax.jit(..., compiler_options=...)`` of an enclosing jit too, since XLA compiles a whole
#: program with the options of its outermost jit. ``xla_cpu_prefer_vector_width=512`` lets
#: the CPU backend emit 16-lane float32 (8-lane float64) vectors where the host has AVX-512,
#: instead of 8 (4): SAUCE's fused loop is one dependent chain of ``T`` rounds (two
#: divisions each) per vector, latency-bound past a few rounds, so twice the lanes per chain
#: is up to 1.5x the throughput (measured on 2 AMD EPYC cores, bench/README.md "SAUCE"). The
#: arithmetic per lane is unchanged (same IEEE operations, same fused multiply-adds): scores
#: are bit for bit those of the default width (tests/test_kernel_options.py). Other
#: platforms ignore it; on CPUs without AVX-512 LLVM splits to the widths it has.
XLA_COMPILER_OPTIONS = {"xla_cpu_prefer_vector_width": 512}
