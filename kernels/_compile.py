"""Jit a kernel so that a top-level call on a CPU compiles with ``XLA_COMPILER_OPTIONS``.

JAX takes ``compiler_options`` only on the outermost jit (a nested jit that has them
raises), and XLA compiles a whole program with the options of that outermost jit. So a
kernel that is called both on its own and inside other programs (``runtime.per_device``,
sweeps, ``vmap``, a caller's jit) is jitted twice: with the options for calls made outside
any JAX trace, and plainly for calls made inside one, where the enclosing jit's options
apply (fastuq's own wrappers pass ``XLA_COMPILER_OPTIONS`` too).
"""

from __future__ import annotations

import functools

import jax

from .constants import XLA_COMPILER_OPTIONS

try:  # JAX's own test of "not inside any trace" (internal; the fallback looks at arguments)
    from jax._src.core import trace_state_clean as _outside_traces
except ImportError:  # pragma: no cover - other JAX versions
    _outside_traces = None


def _on_cpu(args, kwargs) -> bool:
    """Whether a top-level call runs on a CPU: its committed array arguments' devices, else
    :func:`default_platform`."""
    for leaf in jax.tree.leaves((args, kwargs)):
        if isinstance(leaf, jax.Array) and getattr(leaf, "committed", False):
            return all(d.platform == "cpu" for d in leaf.devices())
    return default_platform() == "cpu"


def _top_level(args, kwargs) -> bool:
    if _outside_traces is not None:
        return _outside_traces()
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((args, kwargs)))


def default_platform() -> str:
    """The platform a computation without committed inputs runs on: that of
    ``jax.default_device`` when it is set (fastuq's ``device_scope`` sets it), else JAX's
    default backend."""
    dev = jax.config.jax_default_device
    if dev is None:
        return jax.default_backend()
    return dev if isinstance(dev, str) else dev.platform


def compiler_options(platform: str | None = None) -> dict:
    """``XLA_COMPILER_OPTIONS`` for a CPU program, none for any other platform (the options
    are CPU code-generation settings; other backends are not given them)."""
    platform = default_platform() if platform is None else platform
    return dict(XLA_COMPILER_OPTIONS) if platform == "cpu" else {}


def kernel_jit(fun=None, **jit_kwargs):
    """``jax.jit(fun, **jit_kwargs)`` that compiles with ``XLA_COMPILER_OPTIONS`` when called
    at top level. Usable as a decorator (``@kernel_jit(static_argnames=...)``). The result
    has ``plain`` and ``with_options`` (the two jitted functions), ``__wrapped__`` and
    ``_cache_size()`` (both caches, for ``runtime.compiled_count``)."""
    if fun is None:
        return functools.partial(kernel_jit, **jit_kwargs)
    plain = jax.jit(fun, **jit_kwargs)
    with_options = jax.jit(fun, compiler_options=XLA_COMPILER_OPTIONS, **jit_kwargs)

    @functools.wraps(fun)
    def call(*args, **kwargs):
        if _top_level(args, kwargs) and _on_cpu(args, kwargs):
            return with_options(*args, **kwargs)
        return plain(*args, **kwargs)

    call.plain = plain
    call.with_options = with_options
    call._cache_size = lambda: plain._cache_size() + with_options._cache_size()
    return call
