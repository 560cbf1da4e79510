"""fastuq.io.pack: ragged Arrow/Python columns to padded time-major arrays, against plain loops."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastuq.io.pack import pack_lists, pack_nodes, pack_ragged

value = st.one_of(st.none(), st.floats(-5, 5, allow_nan=False))
node_col = st.lists(
    st.one_of(st.none(), st.lists(st.lists(value, min_size=0, max_size=4), max_size=4)),
    max_size=12,
)


def _loop_nodes(rows, t_max, a_max):
    vals = np.full((t_max, len(rows), a_max), np.nan)
    mask = np.zeros((t_max, len(rows), a_max), bool)
    rmask = np.zeros((t_max, len(rows)), bool)
    for n, traj in enumerate(rows):
        for t, rnd in enumerate(traj or []):
            rmask[t, n] = True
            for k, v in enumerate(rnd):
                if v is not None:
                    vals[t, n, k] = v
                    mask[t, n, k] = True
    return vals, mask, rmask


@given(rows=node_col, cut=st.integers(0, 3))
def test_pack_nodes_matches_loop_including_sliced_arrays(rows, cut):
    col = pa.array(rows, type=pa.list_(pa.list_(pa.float64())))
    col = col.slice(min(cut, len(rows)))
    rows = rows[min(cut, len(rows)):]
    t_max = max([len(r or []) for r in rows], default=0) + 1
    a_max = max([len(x) for r in rows for x in (r or [])], default=0) + 2
    got = pack_nodes(col, t_max=t_max, n_agents=a_max)
    ref = _loop_nodes(rows, t_max, a_max)
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[1], ref[1])
    np.testing.assert_array_equal(got[2], ref[2])


@given(rows=st.lists(st.one_of(st.none(), st.lists(value, max_size=5)), max_size=15),
       cut=st.integers(0, 3))
def test_pack_lists_matches_loop(rows, cut):
    col = pa.array(rows, type=pa.list_(pa.float64())).slice(min(cut, len(rows)))
    rows = rows[min(cut, len(rows)):]
    t_max = max([len(r or []) for r in rows], default=0)
    got, mask = pack_lists(col, t_max=t_max, n_padded=len(rows) + 3)
    assert got.shape == (t_max, len(rows) + 3)
    for n, r in enumerate(rows):
        r = r or []
        assert mask[:, n].tolist() == [t < len(r) for t in range(t_max)]
        expect = [np.nan if v is None else v for v in r]
        np.testing.assert_array_equal(got[: len(r), n], expect)
    assert not mask[:, len(rows):].any()


def test_pack_ragged_python_lists():
    a, m = pack_ragged([[0.5, None], [], [1.0, 0.25, 0.0]])
    assert a.shape == (3, 3)
    assert m.T.tolist() == [[True, True, False], [False, False, False], [True, True, True]]
    assert np.isnan(a[1, 0]) and a[2, 2] == 0.0


def test_sizes_too_small_raise():
    col = pa.array([[[1.0, 2.0]]], type=pa.list_(pa.list_(pa.float64())))
    with pytest.raises(ValueError, match="at least 1 rounds x 2 agents"):
        pack_nodes(col, n_agents=1)
    with pytest.raises(ValueError, match="t_max"):
        pack_ragged([[1.0, 2.0]], t_max=1)
