"""How each registered estimator runs on a :class:`~fastuq._batch.Batch`: which packed arrays
it reads and which kernel it calls. One function per estimator, named by the registry."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ._batch import Batch
from ._sauce import sauce_batch

__all__ = ["run_sauce"]


def _same_rounds(batch: Batch, mask: np.ndarray, other: np.ndarray, field: str) -> None:
    if mask.shape != other.shape or not np.array_equal(mask, other):
        la, lb = mask.sum(axis=0), other.sum(axis=0)
        n = int(np.argmax(la != lb)) if (la != lb).any() else 0
        raise ValueError(
            f"trajectory {batch.labels[n]}: agreement has {int(la[n])} rounds but {field} has "
            f"{int(lb[n])} (field {field})"
        )


def run_sauce(
    batch: Batch, *, params: Mapping[str, object], protocol: str | None, backend: str
) -> np.ndarray:
    """SAUCE uncertainty ``[N]`` from the batch's agreement and token entropy."""
    a, mask = batch.rounds("agreement")
    h, mask_h = batch.rounds("token_entropy")
    _same_rounds(batch, mask, mask_h, "token_entropy")
    out = sauce_batch(
        a, h, mask, protocol=batch.protocol(protocol), backend=backend,
        trajectory_ids=batch.labels, **params,
    )
    return out["score"]
