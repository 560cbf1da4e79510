"""How fastuq's kernels are jitted, and the CPU compile options of a top-level program.

JAX takes ``compiler_options`` only on the outermost jit (a nested jit that has them raises
``ValueError``), and XLA compiles a whole program with the options of that outermost jit.
So the kernels themselves are plain ``jax.jit`` functions (:func:`kernel_jit`): they trace
inside any caller's program (``vmap``, ``shard_map``, a caller's jit) and, called on their
own, compile with XLA's defaults. The code that compiles the top-level program knows that it
is top level and passes :func:`compiler_options` for its platform there: fastuq's engine
(``runtime.run_bucketed``, on one device or several) and the sweep's vmapped scorer do; a
caller scoring with a kernel directly can use :func:`top_level_jit` (or
``jax.jit(..., compiler_options=compiler_options())`` of its own program) for the same
speed. Only public JAX API is used.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax

from .constants import XLA_COMPILER_OPTIONS


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
    are CPU code-generation settings; other backends are not given them). ``platform``:
    ``None`` for :func:`default_platform`."""
    platform = default_platform() if platform is None else platform
    return dict(XLA_COMPILER_OPTIONS) if platform == "cpu" else {}


def kernel_jit(fun: Callable | None = None, **jit_kwargs) -> Callable:
    """``jax.jit(fun, **jit_kwargs)``: how a kernel is jitted. Usable as a decorator
    (``@kernel_jit(static_argnames=...)``). No compile options: the kernel traces inside any
    caller's jit, and the program that calls it at top level brings them
    (:func:`top_level_jit`, ``runtime.run_bucketed``)."""
    if fun is None:
        return functools.partial(kernel_jit, **jit_kwargs)
    return jax.jit(fun, **jit_kwargs)


def top_level_jit(fun: Callable, platform: str | None = None, **jit_kwargs) -> Callable:
    """``jax.jit(fun, compiler_options=compiler_options(platform), **jit_kwargs)``: ``fun``
    (a kernel, or a program calling kernels) compiled as a top-level program with the CPU
    options where ``platform`` (default :func:`default_platform`, read now) is a CPU. Call
    the result outside any JAX trace only (JAX refuses compile options on a nested jit)."""
    return jax.jit(fun, compiler_options=compiler_options(platform), **jit_kwargs)
