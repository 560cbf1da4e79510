"""One chunk of a corpus as the kernels see it: padded time-major arrays, built lazily from an
Arrow table of canonical columns and cached, so each estimator packs only what it reads."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from ._pack import pack_lists, pack_nodes

__all__ = ["Batch"]


class _Label(str):
    """A trajectory name that ``repr``s as itself inside error messages."""

    def __repr__(self) -> str:
        return str(self)


class _Labels(Sequence):
    """Lazy names for error messages: ``'id' (source row k)``."""

    def __init__(self, ids: pa.Array, source: str, row0: int) -> None:
        self._ids, self._source, self._row0 = ids, source, row0

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, n):  # type: ignore[override]
        where = f"{self._source} row {self._row0 + n}" if self._source else f"row {self._row0 + n}"
        return _Label(f"{self._ids[n].as_py()!r} ({where})")


class Batch:
    """A chunk of trajectories with lazily packed inputs.

    Args:
      table: canonical columns (``trajectory_id`` required).
      source: name of the file (or object) it came from, for error messages.
      row0: index of the chunk's first row in the source.
      dtype: float dtype of the packed arrays.
      observation_noise: when given, a constant token entropy (R_t) used for every round of
        corpora without ``token_entropy``.
    """

    def __init__(
        self,
        table: pa.Table,
        *,
        source: str = "",
        row0: int = 0,
        dtype: np.dtype | type = np.float64,
        observation_noise: float | None = None,
    ) -> None:
        self.table = table
        self.source = source
        self.row0 = row0
        self.dtype = np.dtype(dtype)
        self.observation_noise = observation_noise
        self.n = table.num_rows
        self.ids = table.column("trajectory_id").combine_chunks()
        self.labels = _Labels(self.ids, source, row0)
        self._cache: dict[str, tuple] = {}

    def has(self, name: str) -> bool:
        """Whether the input ``name`` (a column or a derived array) can be built."""
        if name == "round_mask":
            return self.has("agreement")
        if name == "token_entropy" and self.observation_noise is not None:
            return self.has("agreement")
        return name in self.table.column_names and self.table.column(name).null_count < self.n

    def column(self, name: str) -> pa.Array:
        if name not in self.table.column_names:
            raise ValueError(f"{self.source or 'corpus'}: no {name} column")
        return self.table.column(name).combine_chunks()

    def protocol(self, override: str | None = None) -> str | np.ndarray:
        """The protocol of every trajectory: ``override``, else the ``protocol`` column."""
        if override is not None:
            return override
        if "protocol" not in self.table.column_names:
            raise ValueError(f"{self.source or 'corpus'}: no protocol column; pass a protocol")
        col = self.column("protocol")
        if col.null_count:
            k = int(np.argmax(col.is_null().to_numpy(zero_copy_only=False)))
            raise ValueError(f"trajectory {self.labels[k]}: no protocol (field protocol)")
        return col.to_numpy(zero_copy_only=False)

    def rounds(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """A per-round column as ``([T, N], round_mask [T, N])``."""
        if name not in self._cache:
            if name == "token_entropy" and self.observation_noise is not None and (
                "token_entropy" not in self.table.column_names
                or self.column("token_entropy").null_count == self.n
            ):
                a, mask = self.rounds("agreement")
                values = np.where(mask, self.dtype.type(self.observation_noise), 0)
                self._cache[name] = (values.astype(self.dtype), mask)
            else:
                self._cache[name] = pack_lists(self.column(name), dtype=self.dtype)
        return self._cache[name]

    def nodes(self, name: str, n_agents: int | None = None) -> tuple[np.ndarray, ...]:
        """A node column as ``(values [T, N, A], node_mask [T, N, A], round_mask [T, N])``."""
        key = f"nodes:{name}"
        if key not in self._cache:
            self._cache[key] = pack_nodes(self.column(name), dtype=self.dtype, n_agents=n_agents)
        return self._cache[key]

    def correct(self) -> np.ndarray | None:
        """Labels ``[N]`` (bool) when every trajectory has one, else ``None``."""
        if "correct" not in self.table.column_names:
            return None
        col = self.column("correct")
        if col.null_count:
            return None
        return col.to_numpy(zero_copy_only=False).astype(bool)
