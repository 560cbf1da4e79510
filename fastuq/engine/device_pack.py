"""Packing and validation on the accelerator.

The host path (:mod:`fastuq.io.pack`, :class:`~fastuq.engine.batch.Batch`,
:mod:`fastuq.engine.inputs`) builds every padded ``[T, N]`` array in NumPy and hands it to
the kernels, which copy it to the device. Here a per-round column goes to the device as it
is stored: its flat values and its list offsets (read from the Arrow buffers, without a
copy where the column has no nulls), transferred once; the padded arrays, the round mask,
the checks of :func:`fastuq.engine.inputs.validate_rounds` and, from the answers' vote
classes, the per-round agreement are built there by jitted gathers, and the kernels read
them where they are.

Shapes are static per bucket: ``N`` is padded to the kernel's bucket
(:func:`fastuq.engine.runtime.bucket_size`), the flat values, the rounds and the answer
slots to powers of two, so a corpus compiles each function once per bucket, not per chunk.
Rows past ``N`` hold the kernel's padding (:data:`~fastuq.engine.inputs.INPUTS`' ``fill``),
exactly what :func:`~fastuq.engine.runtime.run_bucketed` pads host arrays with, and rounds
past a trajectory's last hold what the host packer gives them (NaN; 0 for the observation
noise), so a kernel sees the same bits either way.

The checks come back as a few flags (one small transfer per input). When a flag is set the
device arrays are dropped and the host path builds the input for that chunk, so the error
message (and ``on_error="skip"``'s accounting) is exactly the host's.

Everything here is exact: gathers, comparisons, integer counts, the same dtype cast as the
host (done on the host, into the transfer buffer) and, for agreement from answers, the
quotient ``count / team`` looked up in a table the host computes in float64 and casts, as
:func:`fastuq.signals.agreement_from_answers` does.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastuq.engine.device_array import DeviceArray
from fastuq.engine.runtime import bucket_size, local_devices, x64_scope
from fastuq.io.arrow_lists import combined, list_lengths
from fastuq.io.arrow_lists import offsets as offsets_of

__all__ = ["KERNEL_CHUNK", "PACKS", "ROUND_FILL", "DeviceArray", "agreement_from_codes",
           "checked_rounds", "default_dtype", "on_gpu", "pack_flat", "pack_lists",
           "resolve_pack", "round_flags"]

#: What ``pack=`` accepts: ``"auto"`` (on the device when the kernels run on a GPU, else on
#: the host), ``"host"`` or ``"device"``.
PACKS = ("auto", "host", "device")
#: The largest chunk one kernel call takes (:func:`fastuq.engine.runner.call_kernel`'s
#: ``chunk_size``); larger batches are packed on the host.
KERNEL_CHUNK = 1 << 20
#: Smallest padded length of the flat arrays (values, answer slots, rounds).
MIN_FLAT = 1 << 12
#: Largest ``count / team`` lookup table (entries) built for agreement from answers; a
#: chunk whose teams need more is packed on the host.
MAX_TABLE = 1 << 22
#: Up to this many slots per round, votes are counted by slot comparisons (as the host's
#: ``_PAIRWISE_MAX_SLOTS``); wider rounds are sorted.
PAIRWISE_MAX_SLOTS = 16
#: The padding of the per-round inputs packed here (agreement, token entropy): the ``fill``
#: that :data:`fastuq.engine.inputs.INPUTS` declares for them (it reads it from here).
ROUND_FILL = 0.0


# ------------------------------------------------------------------------------ choosing


def on_gpu() -> bool:
    """Whether the kernels run on a GPU: the first device of
    :func:`fastuq.engine.runtime.local_devices` (the platform of ``device_scope``, else
    JAX's default backend)."""

    return local_devices()[0].platform == "gpu"


def resolve_pack(pack: str, backend: str = "jax") -> bool:
    """Whether to pack on the device: ``"device"`` yes, ``"host"`` no, ``"auto"`` when the
    kernels run on a GPU (:func:`on_gpu`) and ``backend`` is ``"jax"``.

    Raises:
      ValueError: ``pack`` is not one of :data:`PACKS`, or ``"device"`` with the NumPy
        backend (whose kernels read host arrays).
    """
    if pack not in PACKS:
        raise ValueError(f"pack must be one of {PACKS}, got {pack!r}")
    if pack == "device":
        if backend != "jax":
            raise ValueError(f"pack='device' feeds the JAX kernels; backend={backend!r} packs "
                             f"on the host (pack='host' or 'auto')")
        return True
    return pack == "auto" and backend == "jax" and on_gpu()


def default_dtype(dtype: str | np.dtype | type | None) -> np.dtype:
    """The kernels' float dtype: ``dtype`` when given; for ``None`` or ``"auto"``, float32
    when the kernels run on a GPU (:func:`on_gpu`) and float64 otherwise.

    Raises:
      ValueError: a dtype other than float32 or float64.
    """
    if dtype is None or (isinstance(dtype, str) and dtype == "auto"):
        return np.dtype(np.float32 if on_gpu() else np.float64)
    out = np.dtype(dtype)
    if out not in (np.float32, np.float64):
        raise ValueError(f"dtype must be 'float32', 'float64' or 'auto', got {dtype!r}")
    return out


# ------------------------------------------------------------------------------ arrays


def _pow2(n: int, least: int = MIN_FLAT) -> int:
    """The next power of two ``>= n``, at least ``least``."""
    return max(least, 1 << max(0, int(n) - 1).bit_length())


def _jnp():
    import jax.numpy as jnp

    return jnp


def _gather(values, offsets, n, t_max: int, inner, pad):
    """``[T, n_padded]`` of flat ``values`` cut by ``offsets`` (``[n_padded + 1]``): round
    ``t`` of trajectory ``k`` is ``values[offsets[k] + t]`` where it executed, ``inner``
    in a trajectory's later rounds and ``pad`` in rows ``k >= n``; and the round mask."""
    jnp = _jnp()
    start = offsets[:-1]
    lengths = offsets[1:] - start
    t = jnp.arange(t_max, dtype=offsets.dtype)[:, None]
    mask = t < lengths[None, :]
    where = jnp.clip(start[None, :] + t, 0, max(values.shape[0] - 1, 0))
    got = values[where] if values.shape[0] else jnp.zeros(where.shape, values.dtype)
    real = jnp.arange(lengths.shape[0]) < n
    empty = jnp.where(real, jnp.asarray(inner, values.dtype), jnp.asarray(pad, values.dtype))
    return jnp.where(mask, got, empty[None, :]), mask


@functools.cache
def _jitted(name: str):
    """The jitted device functions, built on first use (JAX is imported lazily)."""
    import jax

    if name == "pack":
        return jax.jit(_pack_impl, static_argnames=("t_max", "pad"))
    if name == "flags":
        return jax.jit(_flags_impl)
    if name == "entropy_flags":
        return jax.jit(_entropy_flags_impl)
    if name == "codes":
        return jax.jit(_codes_impl, static_argnames=("t_max", "width", "n_denoms", "pad"))
    if name == "noise":
        return jax.jit(_noise_impl)
    raise KeyError(name)


def _pack_impl(values, offsets, n, *, t_max: int, pad: float):
    return _gather(values, offsets, n, t_max, np.nan, pad)


def _flags_impl(a, mask, n):
    """``[2]`` bool: some trajectory ``< n`` has no executed round; some executed
    agreement is not in [0, 1] (NaN included) -- :func:`validate_rounds`' tests."""
    jnp = _jnp()
    real = jnp.arange(mask.shape[1]) < n
    empty = (real & ~mask.any(axis=0)).any()
    bad = (mask & ~((a >= 0) & (a <= 1))).any()
    return jnp.stack([empty, bad])


def _entropy_flags_impl(h, mask_h, mask_a):
    """``[2]`` bool: the rounds of token entropy differ from agreement's (as
    ``_same_rounds``); some executed entropy is negative or not finite."""
    jnp = _jnp()
    differ = (mask_h.sum(axis=0) != mask_a.sum(axis=0)).any()
    bad = (mask_a & ~((h >= 0) & (h < jnp.inf))).any()
    return jnp.stack([differ, bad])


def _noise_impl(noise, mask):
    jnp = _jnp()
    return jnp.where(mask, noise, jnp.zeros((), noise.dtype))


def _modal(grid):
    """``[R]`` int32: per row of vote classes ``[R, A]`` (``-1``: no vote), the largest
    number of entries sharing one class (0 for a row without a vote)."""
    import jax

    jnp = _jnp()
    width = grid.shape[1]
    if width <= PAIRWISE_MAX_SLOTS:
        count = (grid[:, :, None] == grid[:, None, :]).sum(axis=2, dtype=jnp.int32)
        count = jnp.where(grid >= 0, count, 0)
        return count.max(axis=1, initial=0)
    s = jnp.sort(grid, axis=1)
    idx = jnp.arange(width, dtype=jnp.int32)[None, :]
    new = jnp.concatenate([jnp.ones((s.shape[0], 1), bool), s[:, 1:] != s[:, :-1]], axis=1)
    start = jax.lax.cummax(jnp.where(new, idx, 0), axis=1)
    count = jnp.where(s >= 0, idx - start + 1, 0)
    return count.max(axis=1, initial=0)


def _codes_impl(codes, round_off, rec_off, team, known, table, n, n_rounds, *, t_max: int,
                width: int, n_denoms: int, pad: float):
    """Agreement per round from vote classes, packed; see :func:`agreement_from_codes`."""
    jnp = _jnp()
    r_pad = round_off.shape[0] - 1
    rstart = round_off[:-1]
    rlen = round_off[1:] - rstart
    slot = jnp.arange(width, dtype=round_off.dtype)[None, :]
    inside = slot < rlen[:, None]
    where = jnp.clip(rstart[:, None] + slot, 0, codes.shape[0] - 1)
    grid = jnp.where(inside, codes[where], -1)
    best = _modal(grid)  # [R_pad]
    rounds = jnp.arange(r_pad, dtype=rec_off.dtype)
    parent = jnp.clip(jnp.searchsorted(rec_off[1:], rounds, side="right"), 0,
                      team.shape[0] - 1)
    denom = jnp.where(known[parent], team[parent], rlen)
    real_round = rounds < n_rounds
    rec_len = rec_off[1:] - rec_off[:-1]
    team_bad = (known & (rec_len > 0) & (team <= 0)).any()
    over = (real_round & (rlen > denom)).any()
    look = best * n_denoms + jnp.clip(denom, 0, n_denoms - 1)
    values = table[jnp.clip(look, 0, table.shape[0] - 1)]
    agreement, mask = _gather(values, rec_off, n, t_max, np.nan, pad)
    return agreement, mask, best, jnp.stack([team_bad, over])


# ------------------------------------------------------------------------------ host side


def _numbers(arr: pa.Array) -> np.ndarray | None:
    """The values of a numeric Arrow array as NumPy (no copy without nulls; nulls as NaN,
    as the host packer reads them); ``None`` for a non-numeric type."""
    if not (pa.types.is_floating(arr.type) or pa.types.is_integer(arr.type)):
        return None
    if not arr.null_count:
        return arr.to_numpy(zero_copy_only=True)
    return arr.to_numpy(zero_copy_only=False)


def _list_flat(col: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
    """``(values [total], offsets [N + 1] int64 from 0)`` of a ``list<number>`` column, read
    straight from its Arrow buffers when it has no null list (a null list may own a segment
    of the values, so then through ``list_flatten``); ``None`` when it is not such a
    column."""
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)):
        return None
    n = len(col)
    if n and not col.null_count:
        width = 4 if pa.types.is_list(col.type) else 8
        raw = np.frombuffer(col.buffers()[1], np.int32 if width == 4 else np.int64,
                            count=n + 1, offset=col.offset * width)
        lo, hi = int(raw[0]), int(raw[-1])
        child = col.values.slice(lo, hi - lo)
        offs = raw.astype(np.int64) - lo
    else:
        lengths, _ = list_lengths(col)
        child = pc.list_flatten(col)
        offs = offsets_of(lengths)
    values = _numbers(child)
    return None if values is None else (values, offs)


def _stage(values: np.ndarray, size: int, dtype: np.dtype, fill=0) -> np.ndarray:
    """``[size]`` transfer buffer: ``values`` cast to ``dtype`` (NumPy's assignment cast,
    the host packer's), then ``fill``."""
    buf = np.empty(size, dtype)
    buf[:len(values)] = values
    buf[len(values):] = fill
    return buf


def _stage_offsets(offs: np.ndarray, n_padded: int) -> np.ndarray:
    """``[n_padded + 1]`` int32 offsets: ``offs``, then empty lists."""
    out = np.empty(n_padded + 1, np.int32)
    out[:len(offs)] = offs
    out[len(offs):] = offs[-1]
    return out


def _put(*arrays: np.ndarray):
    """``arrays`` on the kernels' first device (one transfer each)."""
    import jax


    device = local_devices()[0]
    return tuple(jax.device_put(a, device) for a in arrays)


def _n_padded(n: int, t_max: int) -> int:
    """The kernel's bucket for ``n`` trajectories of up to ``t_max`` rounds split over the
    kernels' devices (what :func:`~fastuq.engine.runtime.run_bucketed` pads a ``[T, N]``
    input to)."""

    return bucket_size(n, KERNEL_CHUNK, devices=len(local_devices()), elements=t_max)


def pack_flat(values: np.ndarray, offsets: np.ndarray, *, dtype: np.dtype | type,
              pad: float = 0.0) -> tuple[DeviceArray, DeviceArray]:
    """A flat ragged column packed on the device, as :func:`fastuq.io.pack.pack_offsets`
    packs it on the host.

    Args:
      values: ``[offsets[-1] - offsets[0]]`` flat values (any real dtype; cast to ``dtype``
        on the host, into the transfer buffer, as the host packer casts).
      offsets: ``[N + 1]`` int offsets (need not start at 0; ``offsets[-1] - offsets[0] <
        2**31``).
      dtype: float dtype of the result (float64 runs under a scoped x64).
      pad: value of the rows past ``N`` (the kernel's padding of the input).

    Returns:
      ``(values, round_mask)`` :class:`DeviceArray` s, ``[T, n_padded]`` on the device,
      ``T`` the longest trajectory and ``n_padded`` the kernel bucket of ``N``;
      ``np.asarray`` of each equals ``pack_offsets(values, offsets, dtype=dtype)``.
    """

    dtype = np.dtype(dtype)
    offs = np.asarray(offsets, np.int64)
    offs = offs - offs[0]
    n = len(offs) - 1
    total = int(offs[-1])
    if total >= np.iinfo(np.int32).max:
        raise ValueError(f"{total} values: too many for device packing (at most 2**31 - 1)")
    t_max = int(np.diff(offs).max()) if n else 0
    n_padded = _n_padded(n, t_max)
    buf = _stage(np.asarray(values)[:total], _pow2(total), dtype)
    with x64_scope(dtype):
        v, o = _put(buf, _stage_offsets(offs, n_padded))
        out, mask = _jitted("pack")(v, o, np.int32(n), t_max=t_max, pad=float(pad))
    return DeviceArray(out, n), DeviceArray(mask, n)


def pack_lists(col: pa.Array | pa.ChunkedArray, *, dtype: np.dtype | type,
               pad: float = 0.0) -> tuple[DeviceArray, DeviceArray]:
    """An Arrow ``list<number>`` column (one list per trajectory) packed on the device:
    :func:`fastuq.io.pack.pack_lists`' arrays (``[T, N]``, a null list has no rounds, a null
    value is NaN), padded to ``[T, n_padded]`` with ``pad`` (see :func:`pack_flat`). The
    values and offsets are read from the column's buffers (no copy without nulls).

    Raises:
      ValueError: not a list column of numbers.
    """
    flat = _list_flat(combined(col))
    if flat is None:
        raise ValueError(f"device packing needs a list<number> column, got {col.type}")
    return pack_flat(*flat, dtype=dtype, pad=pad)


def round_flags(a: DeviceArray, mask: DeviceArray) -> np.ndarray:
    """``[2]`` bool on the host: (a trajectory has no executed round, an executed agreement
    is missing or outside [0, 1]): where :func:`~fastuq.engine.inputs.validate_rounds`
    would raise."""

    with x64_scope(a.dtype):
        return np.asarray(_jitted("flags")(a.padded, mask.padded, np.int32(a.n)))


def agreement_from_codes(
    codes: np.ndarray,
    slots: np.ndarray,
    rounds: np.ndarray,
    team: np.ndarray,
    known: np.ndarray,
    *,
    dtype: np.dtype | type,
    pad: float = 0.0,
) -> tuple[DeviceArray, DeviceArray, np.ndarray, object]:
    """Agreement per round from vote classes, built on the device as
    :func:`fastuq.signals.agreement_from_answers` builds it on the host: per round, the
    largest number of votes sharing a class over the team size (``n_agents`` where known,
    else the round's slots), 0 for a round without a vote.

    Args:
      codes: ``[S]`` int vote class of every answer slot, ``-1`` where the slot casts no
        vote (null, empty or unparseable answer).
      slots: ``[R]`` slots of every executed round; rounds: ``[N]`` rounds of every
        trajectory (``sum(rounds) == R``, ``sum(slots) == S``).
      team: ``[N]`` int team sizes; known: ``[N]`` bool, where ``team`` is given.
      dtype: float dtype of the agreement; pad: its value in the rows past ``N``.

    Returns:
      ``(agreement [T, n_padded], round_mask [T, n_padded])`` :class:`DeviceArray` s,
      ``flags [2]`` bool on the host (a known team size ``<= 0`` for a trajectory with
      rounds; a round with more slots than its team: where the host raises), and the
      per-round modal counts ``[R_padded]`` int32 (a device array; ``[:R]`` are the
      rounds').

    Raises:
      ValueError: more slots or rounds than int32 offsets hold, or teams too large for the
        lookup table (:data:`MAX_TABLE`); the caller packs on the host then.
    """

    dtype = np.dtype(dtype)
    slots = np.asarray(slots, np.int64)
    rounds = np.asarray(rounds, np.int64)
    n, n_rounds, total = len(rounds), len(slots), int(slots.sum())
    if max(total, n_rounds) >= np.iinfo(np.int32).max:
        raise ValueError("too many answer slots for device packing")
    team = np.asarray(team, np.int64)
    width = _pow2(int(slots.max()) if n_rounds else 1, 1)
    biggest = max(int(slots.max()) if n_rounds else 0,
                  int(team[known].max()) if known.any() else 0)
    n_denoms = _pow2(biggest + 1, 1)
    if (width + 1) * n_denoms > MAX_TABLE or int(np.abs(team).max(initial=0)) >= 1 << 30:
        raise ValueError("teams too large for the device's agreement table")
    # count / team, computed as the host computes it (float64), then cast; no vote: 0
    with np.errstate(divide="ignore", invalid="ignore"):
        table = np.arange(width + 1, dtype=np.float64)[:, None] / np.arange(n_denoms)
    table[0] = 0.0
    table = table.astype(dtype).reshape(-1)
    t_max = int(rounds.max()) if n else 0
    n_padded = _n_padded(n, t_max)
    staged = (
        _stage(np.asarray(codes), _pow2(total), np.int32, fill=-1),
        _stage_offsets(offsets_of(slots), _pow2(n_rounds)),
        _stage_offsets(offsets_of(rounds), n_padded),
        _stage(team, n_padded, np.int32),
        _stage(np.asarray(known, bool), n_padded, bool, fill=False),
        table,
    )
    with x64_scope(dtype):
        args = _put(*staged)
        agreement, mask, best, flags = _jitted("codes")(
            *args, np.int32(n), np.int32(n_rounds), t_max=t_max, width=width,
            n_denoms=n_denoms, pad=float(pad))
        flags = np.asarray(flags)
    return DeviceArray(agreement, n), DeviceArray(mask, n), flags, best


# ------------------------------------------------------------------------------ batches


def _agreement_device(batch) -> tuple[DeviceArray, DeviceArray] | None:
    """Agreement and its round mask of ``batch`` packed on the device, or ``None`` where a
    check fails (or the chunk cannot be packed there)."""
    pad = ROUND_FILL
    if batch._present("agreement"):
        flat = _list_flat(batch.column("agreement"))
        if flat is None:
            return None
        a, mask = pack_flat(*flat, dtype=batch.dtype, pad=pad)
    else:
        from fastuq.signals import answer_votes, read_n_agents

        answers, classes = batch.vote_classes()
        answers = combined(answers)
        rounds, _ = list_lengths(answers)
        per_round = pc.list_flatten(answers)
        slots, _ = list_lengths(per_round)
        vote = answer_votes(pc.list_flatten(per_round))
        codes = np.where(vote & (classes >= 0), classes, -1)
        n_agents = batch.column("n_agents") if batch._present("n_agents") else None
        team, known = read_n_agents(n_agents, batch.n)  # the host's reading of n_agents
        a, mask, flags, _ = agreement_from_codes(codes, slots, rounds, team, known,
                                                 dtype=batch.dtype, pad=pad)
        if flags.any():
            return None
    if round_flags(a, mask).any():
        return None
    return a, mask


def _entropy_device(batch, a: DeviceArray, mask: DeviceArray) -> DeviceArray | None:
    """Token entropy of ``batch`` on the device, checked against agreement's rounds, or
    ``None`` where a check fails."""
    pad = ROUND_FILL
    if batch._present("token_entropy"):
        col = batch.column("token_entropy")
    elif batch._present("topk_logprobs"):
        col = batch.topk_entropies()[1]  # the pass the host path shares, once per chunk
    elif batch.observation_noise is not None:
        noise = np.asarray(batch.dtype.type(batch.observation_noise))
        if not (np.isfinite(noise) and noise >= 0):
            return None
        with x64_scope(batch.dtype):
            (value,) = _put(noise)
            return DeviceArray(_jitted("noise")(value, mask.padded), a.n)
    else:
        return None
    flat = _list_flat(combined(col))
    if flat is None:
        return None
    h, mask_h = pack_flat(*flat, dtype=batch.dtype, pad=pad)
    with x64_scope(batch.dtype):
        if mask_h.padded.shape != mask.padded.shape:
            return None
        flags = np.asarray(_jitted("entropy_flags")(h.padded, mask_h.padded, mask.padded))
    return None if flags.any() else h


def checked_rounds(batch, name: str) -> tuple[DeviceArray, DeviceArray] | None:
    """``(values, round_mask)`` of the per-round input ``name`` (``"agreement"`` or
    ``"token_entropy"``) packed and checked on the device, when ``batch`` packs there
    (``Batch(pack=...)``) and every check that the host builder of the input runs passes
    (for token entropy: agreement's too, and the same rounds). ``None`` otherwise: the host
    path then builds the input, and raises its error. Computed once per chunk."""
    if not batch.device_pack or name not in ("agreement", "token_entropy"):
        return None
    if not 0 < batch.n <= KERNEL_CHUNK:
        return None
    key = f"device:{name}"
    if key not in batch._cache:
        try:
            if name == "agreement":
                got = _agreement_device(batch)
            else:
                base = checked_rounds(batch, "agreement")
                got = None if base is None else _entropy_device(batch, *base)
                got = None if got is None else (got, base[1])
        except ValueError:  # RecordError included: the host path raises it again, its way
            got = None
        batch._cache[key] = got
    return batch._cache[key]
