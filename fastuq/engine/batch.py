"""One chunk of a corpus as the kernels see it: padded time-major arrays, built lazily from an
Arrow table of canonical columns and cached, so each estimator packs only what it reads."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from fastuq.engine.device_pack import resolve_pack
from fastuq.errors import RecordError
from fastuq.io.arrow_lists import combined
from fastuq.io.pack import NodeLayout, node_layout, pack_lists, pack_nodes

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
      pack: where the per-round inputs (``agreement``, ``round_mask``, ``token_entropy``)
        are packed and checked: ``"host"`` (default: NumPy arrays), ``"device"`` (on the
        kernels' device, :mod:`fastuq.engine.device_pack`: the builders of
        :mod:`fastuq.engine.inputs` return :class:`~fastuq.engine.device_pack.DeviceArray`
        s; a chunk that fails a check is packed on the host, which raises its error) or
        ``"auto"`` (the device when the kernels run on a GPU). The numbers are the same.
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
        pack: str = "host",
    ) -> None:
        self.table = table
        self.source = source
        self.row0 = row0
        self.dtype = np.dtype(dtype)
        self.observation_noise = observation_noise
        self.math = math
        self.processes = processes
        self.pack = pack
        self.device_pack = resolve_pack(pack)
        self.n = table.num_rows
        self.ids = combined(table.column("trajectory_id"))
        if rows is None:
            rows = np.arange(row0, row0 + self.n)
        self.rows = rows  # [n] the source row of every record
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
        if name == "belief" and not self._present("belief"):
            return self._present("answer_logprob")
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
        return combined(self.table.column(name))

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
                    col = self.topk_entropies()[1]
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

    def vote_classes(self) -> tuple[pa.Array, np.ndarray]:
        """The ``answers`` column and the vote class of every answer slot: ``(answers,
        classes [S] int64)``, ``S`` the slots of ``pc.list_flatten(pc.list_flatten(answers))``
        (``[record][round][agent]`` order). Equivalent answers (equal after normalisation, or
        equal numbers: ``0.5`` and ``\\frac{1}{2}``; with ``math``, also proven equal by
        math-verify) share an id; ``-1`` for a slot that casts no vote (null, empty or
        unparseable). Each distinct answer string of the chunk is normalised once;
        math-verify checks only pairs that meet in a round. Ids are labels of this chunk: only
        their equality within a round means anything. Computed once per chunk and shared by
        the agreement (:meth:`rounds`) and the packed classes (:meth:`answer_classes`)."""
        if "vote_classes" not in self._cache:
            import pyarrow.compute as pc

            from fastuq.answers import vote_classes
            from fastuq.io.arrow_lists import list_lengths

            answers = self.column("answers")
            rounds = pc.list_flatten(answers)
            flat = pc.list_flatten(rounds)
            enc = pc.dictionary_encode(flat.cast(pa.string()))
            codes = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False)  # int32

            def group() -> np.ndarray:  # the round of every slot (math-verify checks only)
                slots, _ = list_lengths(rounds)
                return np.repeat(np.arange(len(rounds)), slots)

            classes = vote_classes(enc.dictionary.to_pylist(), codes, group, math=self.math,
                                   processes=self.processes)
            self._cache["vote_classes"] = (answers, classes)
        return self._cache["vote_classes"]

    def _agreement_from_answers(self) -> tuple[np.ndarray, np.ndarray]:
        """Agreement per round from the parsed ``answers``, the votes of :meth:`vote_classes`."""
        from fastuq.signals import agreement_from_answers

        answers, classes = self.vote_classes()
        n_agents = self.column("n_agents") if self._present("n_agents") else None
        values, mask = agreement_from_answers(answers, n_agents, classes=classes,
                                              ids=self.ids, padded=True)
        return values.astype(self.dtype), mask

    def answer_classes(self) -> tuple[np.ndarray, np.ndarray]:
        """The vote class of every node, packed: ``(answer_class [T, N, A] int32,
        round_mask [T, N])`` with ``A`` = :attr:`n_slots`; ``-1`` where the agent cast no
        vote (silent, null, empty or unparseable answer) and in padding. The classes are
        those of :meth:`vote_classes`, the same the agreement counts."""
        if "answer_classes" not in self._cache:
            answers, classes = self.vote_classes()
            values, _, round_mask = pack_nodes(
                answers, dtype=np.int32, fill=-1, leaf_values=classes.astype(np.int32),
                layout=self.node_layout(answers))
            self._cache["answer_classes"] = (values, round_mask)  # -1 off the valid nodes
        return self._cache["answer_classes"]

    def active(self) -> np.ndarray:
        """``[T, N, A]`` bool: whether each agent is still in the team in each round (the
        ``active`` column; true where the corpus has no such column, where a record's list or
        a node is null, and in padding), shaped like :meth:`answer_classes`."""
        if "active" not in self._cache:
            _, round_mask = self.answer_classes()
            shape = (round_mask.shape[0], self.n, self.n_slots)
            if "active" in self.table.column_names and self.table.num_rows:
                try:
                    values, node_mask, _ = pack_nodes(self.column("active"), dtype=bool,
                                                      t_max=shape[0], n_agents=shape[2],
                                                      fill=True)
                except ValueError as exc:
                    raise ValueError(f"{self.source or 'corpus'}: active: {exc}") from None
                self._cache["active"] = values | ~node_mask
            else:
                self._cache["active"] = np.ones(shape, bool)
        return self._cache["active"]

    def nodes(self, name: str) -> tuple[np.ndarray, ...]:
        """A node column as ``(values [T, N, A], node_mask [T, N, A], round_mask [T, N])``,
        with ``A`` = :attr:`n_slots`. ``node_entropy`` is built from ``topk_logprobs`` when
        the corpus has no such column."""
        key = f"nodes:{name}"
        if key not in self._cache:
            col = self.node_column(name)
            try:
                self._cache[key] = pack_nodes(col, dtype=self.dtype,
                                              layout=self.node_layout(col))
            except ValueError as exc:
                raise ValueError(f"{self.source or 'corpus'}: {name}: {exc}") from None
        return self._cache[key]

    def node_column(self, name: str) -> pa.Array:
        """The ``list<list<...>>`` Arrow column behind :meth:`nodes` of ``name``: the column,
        or for ``node_entropy`` without such a column, the node entropies derived from
        ``topk_logprobs``."""
        if name == "node_entropy" and not self._present("node_entropy"):
            return self.topk_entropies()[0]
        return self.column(name)

    def topk_entropies(self) -> tuple[pa.Array, pa.Array]:
        """``(node, round)`` mean token entropies derived from ``topk_logprobs``
        (:func:`fastuq.signals.token_entropy_from_topk`, trajectory ids in its messages),
        computed once per chunk: the token entropy (:meth:`rounds`) and the node entropy
        (:meth:`nodes`) come from the same pass over the top-k log-probabilities."""
        if "topk_entropies" not in self._cache:
            from fastuq.signals import token_entropy_from_topk

            self._cache["topk_entropies"] = token_entropy_from_topk(
                self.column("topk_logprobs"), ids=self.ids)
        return self._cache["topk_entropies"]

    def node_layout(self, col: pa.Array) -> NodeLayout:
        """The :class:`~fastuq.io.pack.NodeLayout` of a node column of this chunk packed to
        :attr:`n_slots` agents: shared by every node column with the same lists (built once
        per chunk for ``seq_logprob``, ``n_tokens``, ``answers``, ...)."""
        known: list[NodeLayout] = self._cache.setdefault("node_layouts", [])  # type: ignore
        layout = node_layout(col, n_agents=self.n_slots, known=known)
        if not any(k is layout for k in known):
            known.append(layout)
        return layout

    def team_sizes(self, node_column: str = "seq_logprob") -> np.ndarray:
        """``[N]`` int64 team size of every trajectory: its ``n_agents``, or where that is
        missing, its widest round of ``node_column`` or ``predecessors``."""
        widths = np.zeros(self.n, np.int64)
        for name in (node_column, "predecessors"):
            if self._present(name):
                widths = np.maximum(widths, _row_widths(self.column(name)))
        if not self._present("n_agents"):
            return widths
        col = self.column("n_agents")
        valid = col.is_valid().to_numpy(zero_copy_only=False)
        values = col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        return np.where(valid, values, widths)

    def edges(self, node_column: str = "seq_logprob") -> np.ndarray | None:
        """The interaction graph from the ``predecessors`` column as packed bit rows (see
        :func:`_pack_predecessors`), aligned with the rounds of ``node_column``, or ``None``
        when the corpus has no such column (every node takes the protocol default)."""
        if not self._present("predecessors"):
            return None
        key = f"edges:{node_column}"
        if key not in self._cache:
            round_mask = self.nodes(node_column)[2]
            self._cache[key] = _pack_predecessors(
                self.column("predecessors"), self.n_slots, self.team_sizes(node_column),
                round_mask.sum(axis=0), round_mask.shape[0], self.labels, node_column,
            )
        return self._cache[key]

    def correct(self) -> np.ndarray | None:
        """Labels ``[N]`` (bool) when every trajectory has one, else ``None``."""
        if "correct" not in self.table.column_names:
            return None
        col = self.column("correct")
        if col.null_count:
            return None
        return col.to_numpy(zero_copy_only=False).astype(bool)


def _row_widths(col: pa.Array) -> np.ndarray:
    """``[N]`` the longest round (inner list) of every trajectory of a node column."""
    import pyarrow.compute as pc

    from fastuq.io.arrow_lists import list_lengths, parents

    traj_len, _ = list_lengths(col)
    round_len, _ = list_lengths(pc.list_flatten(col))
    widths = np.zeros(len(col), np.int64)
    np.maximum.at(widths, parents(traj_len), round_len)
    return widths


def _team_words(team: np.ndarray, n_words: int) -> np.ndarray:
    """``[N, W]`` uint32: bits ``0 .. team - 1`` set (bit ``j % 32`` of word ``j // 32``)."""
    from fastuq.kernels.umas import WORD_BITS

    count = np.clip(team[:, None] - WORD_BITS * np.arange(n_words)[None, :], 0, WORD_BITS)
    return ((np.uint64(1) << count.astype(np.uint64)) - np.uint64(1)).astype(np.uint32)


def _pack_predecessors(
    col: pa.Array,
    n_slots: int,
    team: np.ndarray,
    node_rounds: np.ndarray,
    t_max: int,
    labels,
    node_column: str = "seq_logprob",
) -> np.ndarray:
    """``list<list<list<int>>>`` predecessors to packed bit rows for the UMAS kernel.

    Semantics (DESIGN.md, UMAS): a list is the node's whole predecessor set (an empty list:
    none, ``w = 1``); a null -- the trajectory's whole entry, a round, a node, or a slot past
    the end of a round list -- takes the protocol default, every *other* agent of the team
    (the kernel keeps only those active at ``t-1``). Indices are checked against the
    trajectory's own team size.

    Args:
      col: ``[N]`` the predecessors column of the chunk.
      n_slots: padded agent slots ``A``; team: ``[N]`` team sizes (``n_agents``).
      node_rounds: ``[N]`` rounds of the node confidence column; a non-null entry must have
        as many. t_max: rounds to allocate.
      labels: trajectory names for errors; node_column: named in them.

    Returns:
      ``[T, N, A]`` uint32 bit rows when ``A <= 32``, else ``[T, N, A, W]`` uint32 words with
      ``W = ceil(A / 32)`` (the layouts of :func:`fastuq.kernels.umas.pack_edges`).

    Raises:
      RecordError (a ValueError): an index outside ``[0, n_agents)`` (naming trajectory,
      round, agent and index), a null index, or a round count different from
      ``node_column``'s (field predecessors). (``fastuq.io.schema.validate`` has already
      checked that the rounds and their slots line up with the node columns.)
    """
    import pyarrow.compute as pc

    from fastuq.io.arrow_lists import list_lengths, parents, ramp
    from fastuq.kernels.umas import WORD_BITS, edge_words

    n = len(col)
    team = np.minimum(team, n_slots)  # a slot past the packed ones names no agent
    traj_len, traj_valid = list_lengths(col)  # rounds per trajectory (null: 0)
    bad = traj_valid & (traj_len != node_rounds)
    if bad.any():
        k = int(np.argmax(bad))
        raise RecordError(
            f"trajectory {labels[k]}: predecessors has {int(traj_len[k])} rounds but "
            f"{node_column} has {int(node_rounds[k])} (field predecessors)", row=k
        )
    rounds = pc.list_flatten(col)  # per (trajectory, round): list over agents
    round_len, _ = list_lengths(rounds)
    n_of_round = parents(traj_len)
    t_of_round = ramp(traj_len)
    nodes = pc.list_flatten(rounds)  # per node: list of predecessor indices (null: default)
    node_len, node_valid = list_lengths(nodes)
    round_of_node = parents(round_len)
    i_of_node = ramp(round_len)
    flat = pc.list_flatten(nodes)
    owner = parents(node_len)
    null = flat.is_null().to_numpy(zero_copy_only=False)
    preds = flat.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    bad = null | (preds < 0) | (preds >= team[n_of_round[round_of_node[owner]]])
    if bad.any():
        e = int(np.argmax(bad))
        r = int(round_of_node[owner[e]])
        k = int(n_of_round[r])
        what = "null" if null[e] else str(int(preds[e]))
        raise RecordError(
            f"trajectory {labels[k]}, round {int(t_of_round[r])}, agent "
            f"{int(i_of_node[owner[e]])}: predecessor {what} is not an agent of the team of "
            f"{int(team[k])} (field predecessors)", row=k
        )
    n_words = edge_words(n_slots)
    # Default rows: every other agent of the team.
    slot = np.arange(n_slots)
    own = np.zeros((n_slots, n_words), np.uint32)
    own[slot, slot // WORD_BITS] = np.uint32(1) << (slot % WORD_BITS).astype(np.uint32)
    default = _team_words(team, n_words)[:, None, :] & ~own[None]  # [N, A, W]
    out = np.broadcast_to(default[None], (t_max, n, n_slots, n_words)).copy()
    # Explicit rows (non-null nodes, empty lists included) replace their defaults.
    bits = np.zeros((len(nodes), n_words), np.uint32)
    np.bitwise_or.at(bits, (owner, preds // WORD_BITS),
                     np.left_shift(np.uint32(1), (preds % WORD_BITS).astype(np.uint32)))
    r = round_of_node[node_valid]
    out[t_of_round[r], n_of_round[r], i_of_node[node_valid]] = bits[node_valid]
    return out[..., 0] if n_slots <= WORD_BITS else out
