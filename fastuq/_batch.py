"""One chunk of a corpus as the kernels see it: padded time-major arrays, built lazily from an
Arrow table of canonical columns and cached, so each estimator packs only what it reads."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from ._errors import RecordError
from ._pack import pack_lists, pack_nodes

__all__ = ["Batch"]


class _Label(str):
    """A trajectory name that ``repr``s as itself inside error messages."""

    def __repr__(self) -> str:
        return str(self)


class _Labels(Sequence):
    """Lazy names for error messages: ``'id' (source row k)``."""

    def __init__(self, ids: pa.Array, source: str, rows: np.ndarray) -> None:
        self._ids, self._source, self._rows = ids, source, rows

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, n):  # type: ignore[override]
        row = int(self._rows[n])
        where = f"{self._source} row {row}" if self._source else f"row {row}"
        return _Label(f"{self._ids[n].as_py()!r} ({where})")


class Batch:
    """A chunk of trajectories with lazily packed inputs.

    Args:
      table: canonical columns (``trajectory_id`` required).
      source: name of the file (or object) it came from, for error messages.
      row0: index of the chunk's first row in the source.
      rows: ``[n]`` source row of every record (default ``row0, row0 + 1, ...``), for
        chunks from which bad records were dropped.
      dtype: float dtype of the packed arrays.
      observation_noise: when given, a constant token entropy (R_t) used for every round of
        corpora without ``token_entropy``.
      math: when agreement is built from parsed answers, also let answers that math-verify
        proves equivalent vote together (``fastuq[math]``); processes: its worker processes.
    """

    def __init__(
        self,
        table: pa.Table,
        *,
        source: str = "",
        row0: int = 0,
        rows: np.ndarray | None = None,
        dtype: np.dtype | type = np.float64,
        observation_noise: float | None = None,
        math: bool = False,
        processes: int | None = None,
    ) -> None:
        self.table = table
        self.source = source
        self.row0 = row0
        self.dtype = np.dtype(dtype)
        self.observation_noise = observation_noise
        self.math = math
        self.processes = processes
        self.n = table.num_rows
        self.ids = table.column("trajectory_id").combine_chunks()
        if rows is None:
            rows = np.arange(row0, row0 + self.n)
        self.labels = _Labels(self.ids, source, rows)
        self._cache: dict[str, tuple] = {}

    def has(self, name: str) -> bool:
        """Whether the input ``name`` (a column or a derived array) can be built."""
        if name == "round_mask":
            return self.has("agreement")
        if name == "node_mask":
            return self.has("seq_logprob")
        if name == "agreement" and not self._present("agreement"):
            return self._present("answers")
        if name == "token_entropy" and not self._present("token_entropy"):
            return self._present("topk_logprobs") or (
                self.observation_noise is not None and self.has("agreement")
            )
        if name == "node_entropy" and not self._present("node_entropy"):
            return self._present("topk_logprobs")
        return self._present(name)

    def _present(self, name: str) -> bool:
        return name in self.table.column_names and self.table.column(name).null_count < self.n

    @property
    def n_slots(self) -> int:
        """Agent slots per round: the largest ``n_agents`` of the chunk (or, without that
        column, the longest node list), rounded up to a power of two. Every chunk of a corpus
        then packs to the same ``A``, so reductions over agents run in the same order and
        chunking never changes a bit (and jit compiles once per bucket)."""
        if "n_slots" not in self._cache:
            if self._present("n_agents"):
                a = int(self.column("n_agents").to_numpy(zero_copy_only=False).max())
            else:
                import pyarrow.compute as pc

                a = 1
                for name in ("seq_logprob", "n_tokens", "answers", "node_entropy",
                             "topk_logprobs", "predecessors"):
                    if self._present(name):
                        rounds = pc.list_flatten(self.column(name))
                        if len(rounds):
                            a = max(a, int(pc.max(pc.list_value_length(rounds)).as_py() or 1))
            self._cache["n_slots"] = 1 << max(0, a - 1).bit_length()
        return self._cache["n_slots"]

    def column(self, name: str) -> pa.Array:
        if name not in self.table.column_names:
            raise ValueError(f"{self.source or 'corpus'}: no {name} column")
        return self.table.column(name).combine_chunks()

    def protocol(self, override: str | None = None) -> str | pa.Array:
        """The protocol of every trajectory: ``override``, else the ``protocol`` column (an
        Arrow string array ``[N]``)."""
        if override is not None:
            return override
        if "protocol" not in self.table.column_names:
            raise ValueError(f"{self.source or 'corpus'}: no protocol column; pass a protocol")
        col = self.column("protocol")
        if col.null_count:
            k = int(np.argmax(col.is_null().to_numpy(zero_copy_only=False)))
            raise RecordError(f"trajectory {self.labels[k]}: no protocol (field protocol)", row=k)
        return col.cast(pa.string())

    def rounds(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """A per-round column as ``([T, N], round_mask [T, N])``."""
        if name not in self._cache:
            if name == "agreement" and not self._present("agreement"):
                self._cache[name] = self._agreement_from_answers()
            elif name == "token_entropy" and not self._present("token_entropy"):
                if self._present("topk_logprobs"):
                    from .signals import token_entropy_from_topk

                    col = token_entropy_from_topk(self.column("topk_logprobs"), ids=self.ids)[1]
                    self._cache[name] = pack_lists(col, dtype=self.dtype)
                elif self.observation_noise is not None:
                    _, mask = self.rounds("agreement")
                    values = np.where(mask, self.dtype.type(self.observation_noise), 0)
                    self._cache[name] = (values.astype(self.dtype), mask)
                else:
                    self.column(name)  # raises: no such column
            else:
                self._cache[name] = pack_lists(self.column(name), dtype=self.dtype)
        return self._cache[name]

    def _agreement_from_answers(self) -> tuple[np.ndarray, np.ndarray]:
        """Agreement per round from the parsed ``answers``: equivalent answers (equal after
        normalisation, or equal numbers: ``0.5`` and ``\\frac{1}{2}``; with ``math``, also
        proven equal by math-verify) vote together. Each distinct answer string of the chunk
        is normalised once; math-verify checks only pairs that meet in a round."""
        import pyarrow.compute as pc

        from ._arrow import list_lengths
        from .answers import vote_classes
        from .signals import agreement_from_answers

        answers = self.column("answers")
        rounds = pc.list_flatten(answers)
        flat = pc.list_flatten(rounds)
        enc = pc.dictionary_encode(flat.cast(pa.string()))
        codes = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        def group() -> np.ndarray:  # the round of every slot (math-verify checks only)
            slots, _ = list_lengths(rounds)
            return np.repeat(np.arange(len(rounds)), slots)

        classes = vote_classes(enc.dictionary.to_pylist(), codes, group, math=self.math,
                               processes=self.processes)
        n_agents = self.column("n_agents") if self._present("n_agents") else None
        values, mask = agreement_from_answers(answers, n_agents, classes=classes,
                                              ids=self.ids, padded=True)
        return values.astype(self.dtype), mask

    def nodes(self, name: str) -> tuple[np.ndarray, ...]:
        """A node column as ``(values [T, N, A], node_mask [T, N, A], round_mask [T, N])``,
        with ``A`` = :attr:`n_slots`. ``node_entropy`` is built from ``topk_logprobs`` when
        the corpus has no such column."""
        key = f"nodes:{name}"
        if key not in self._cache:
            if name == "node_entropy" and not self._present("node_entropy"):
                from .signals import token_entropy_from_topk

                col = token_entropy_from_topk(self.column("topk_logprobs"))[0]
            else:
                col = self.column(name)
            try:
                self._cache[key] = pack_nodes(col, dtype=self.dtype, n_agents=self.n_slots)
            except ValueError as exc:
                raise ValueError(f"{self.source or 'corpus'}: {name}: {exc}") from None
        return self._cache[key]

    def edges(self) -> np.ndarray | None:
        """The interaction graph from the ``predecessors`` column as packed bit rows
        ``[T, N, A]`` (bit ``j`` of ``[t, n, i]``: node ``(t, i)`` read agent ``j`` of round
        ``t-1``), or ``None`` when the corpus has none (use the protocol default)."""
        if not self._present("predecessors"):
            return None
        if "edges" not in self._cache:
            self._cache["edges"] = _pack_predecessors(
                self.column("predecessors"), self.n_slots, self.labels
            )
        return self._cache["edges"]

    def correct(self) -> np.ndarray | None:
        """Labels ``[N]`` (bool) when every trajectory has one, else ``None``."""
        if "correct" not in self.table.column_names:
            return None
        col = self.column("correct")
        if col.null_count:
            return None
        return col.to_numpy(zero_copy_only=False).astype(bool)


def _pack_predecessors(col: pa.Array, n_slots: int, labels) -> np.ndarray:
    """``list<list<list<int>>>`` predecessors to packed bit rows ``[T, N, A]`` (uint32)."""
    import pyarrow.compute as pc

    from ._arrow import list_lengths, offsets

    traj_len, _ = list_lengths(col)  # rounds per trajectory
    rounds = pc.list_flatten(col)  # per (trajectory, round): list over agents
    round_len, _ = list_lengths(rounds)  # agent slots per round
    nodes = pc.list_flatten(rounds)  # per node: list of predecessor indices (null: silent)
    node_len, _ = list_lengths(nodes)
    preds = pc.list_flatten(nodes).to_numpy(zero_copy_only=False).astype(np.int64)
    owner = np.repeat(np.arange(len(nodes)), node_len)
    bad = (preds < 0) | (preds >= n_slots)
    if bad.any():
        node = int(owner[np.argmax(bad)])
        round_of_node = np.repeat(np.arange(len(rounds)), round_len)
        traj = int(np.repeat(np.arange(len(col)), traj_len)[round_of_node[node]])
        raise RecordError(
            f"trajectory {labels[traj]}: predecessor {int(preds[np.argmax(bad)])} is not an "
            f"agent slot in [0, {n_slots}) (field predecessors)", row=traj
        )
    bits = np.zeros(len(nodes), np.int64)
    np.bitwise_or.at(bits, owner, np.left_shift(1, preds))
    bits_col = pa.ListArray.from_arrays(
        pa.array(offsets(round_len, np.int32)),
        pa.array(bits, pa.int64(), mask=nodes.is_null().to_numpy(zero_copy_only=False)),
    )
    nested = pa.ListArray.from_arrays(pa.array(offsets(traj_len, np.int32)), bits_col)
    values, _, _ = pack_nodes(nested, dtype=np.uint32, n_agents=n_slots, fill=0)
    return values
