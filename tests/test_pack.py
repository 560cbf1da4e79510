"""fastuq.io.pack: ragged Arrow/Python columns to padded time-major arrays, against plain loops."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastuq.io.pack import node_layout, pack_lists, pack_nodes, pack_ragged

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


@given(rows=node_col, cut=st.integers(0, 3), pad=st.integers(0, 2))
def test_trajectory_major_layout_matches_loop(rows, cut, pad):
    """order="trajectory": the loop's arrays with the round and trajectory axes swapped
    ([N, T, A], round mask [N, T]), trajectories past N padding."""
    col = pa.array(rows, type=pa.list_(pa.list_(pa.float64()))).slice(min(cut, len(rows)))
    rows = rows[min(cut, len(rows)):]
    t_max = max([len(r or []) for r in rows], default=0) + 1
    a_max = max([len(x) for r in rows for x in (r or [])], default=0) + 1
    layout = node_layout(col, t_max=t_max, n_agents=a_max, n_padded=len(rows) + pad,
                         order="trajectory")
    got = pack_nodes(col, layout=layout)
    vals, mask, rmask = _loop_nodes(rows + [None] * pad, t_max, a_max)
    np.testing.assert_array_equal(got[0], vals.transpose(1, 0, 2))
    np.testing.assert_array_equal(got[1], mask.transpose(1, 0, 2))
    np.testing.assert_array_equal(got[2], rmask.T)


def test_node_layout_is_shared_only_by_columns_with_the_same_lists():
    """Two columns with the same lists share one layout (the values still their own);
    another shape of lists, or other sizes, gets a new one; each packs as the loop does."""
    a = pa.array([[[1.0, None], [2.0]], None, [[3.0, 4.0, 5.0]]],
                 type=pa.list_(pa.list_(pa.float64())))
    same = pa.array([[[7, 8], [9]], None, [[None, 11, 12]]], type=pa.list_(pa.list_(pa.int32())))
    other = pa.array([[[1.0], [2.0, 3.0]], None, [[3.0, 4.0, 5.0]]],
                     type=pa.list_(pa.list_(pa.float64())))
    first = node_layout(a, n_agents=4)
    assert node_layout(same, n_agents=4, known=[first]) is first
    assert node_layout(other, n_agents=4, known=[first]) is not first
    assert node_layout(a, n_agents=8, known=[first]) is not first
    values, mask, rounds = pack_nodes(same, layout=first)
    ref = _loop_nodes([[[7, 8], [9]], None, [[None, 11, 12]]], 2, 4)
    np.testing.assert_array_equal(values, ref[0])
    np.testing.assert_array_equal(mask, ref[1])
    np.testing.assert_array_equal(rounds, ref[2])
    longer = pa.array([[[1.0, 2.0], [2.0, 3.0]], None, [[3.0, 4.0, 5.0]]],
                      type=pa.list_(pa.list_(pa.float64())))
    with pytest.raises(ValueError, match="layout has 6 slots, the column 7"):
        pack_nodes(longer, layout=first)
    with pytest.raises(ValueError, match="order must be"):
        node_layout(a, order="agent")


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
