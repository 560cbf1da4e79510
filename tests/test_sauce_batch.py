"""fastuq.sauce_batch: ragged and padded input, invariances, parameters, errors, compilation."""

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fastuq
from fastuq.engine.runtime import compiled_count


def _ragged(rng, n, t_max):
    lengths = rng.integers(1, t_max + 1, n)
    agreement = [list(rng.integers(0, 5, k) / 4.0) for k in lengths]
    entropy = [list(rng.exponential(0.4, k)) for k in lengths]
    return agreement, entropy


@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 30),
    t_max=st.integers(1, 8),
    backend=st.sampled_from(["jax", "numpy"]),
    protocol=st.sampled_from(["debate", "dylan"]),
)
def test_batch_equals_scalar_api_float64(seed, n, t_max, backend, protocol):
    rng = np.random.default_rng(seed)
    agreement, entropy = _ragged(rng, n, t_max)
    out = fastuq.sauce_batch(agreement, entropy, protocol=protocol, backend=backend,
                             return_trace=True)
    for k in range(n):
        ref = fastuq.sauce(agreement[k], entropy[k], protocol)
        assert out["score"][k] == pytest.approx(ref["score"], abs=1e-12)
        assert out["final_mu"][k] == pytest.approx(ref["trace"]["final_mu"], abs=1e-12)
        mus = [r["mu"] for r in ref["trace"]["rounds"]]
        np.testing.assert_allclose(out["mu"][: len(mus), k], mus, atol=1e-12)
        assert np.isnan(out["mu"][len(mus):, k]).all()


def test_float32_batch_within_1e5_of_scalar():
    rng = np.random.default_rng(0)
    agreement, entropy = _ragged(rng, 200, 6)
    out = fastuq.sauce_batch(agreement, entropy, dtype=np.float32)
    assert out["score"].dtype == np.float32
    ref = [fastuq.sauce_score(a, h) for a, h in zip(agreement, entropy, strict=True)]
    np.testing.assert_allclose(out["score"], ref, atol=1e-5)


def test_padding_and_batch_size_do_not_change_scores():
    rng = np.random.default_rng(1)
    agreement, entropy = _ragged(rng, 301, 5)
    base = fastuq.sauce_batch(agreement, entropy)["score"]
    # Extra padded rounds filled with garbage, a different chunking and bucket sizes.
    a, m = fastuq.io.pack.pack_ragged(agreement, t_max=9)
    h, _ = fastuq.io.pack.pack_ragged(entropy, t_max=9)
    a[~m], h[~m] = 7.0, -3.0
    padded = fastuq.sauce_batch(a, h, m, chunk_size=64)["score"]
    np.testing.assert_array_equal(padded, base)
    # Each trajectory alone (batch size 1) gives the same number.
    singles = [fastuq.sauce_batch([agreement[k]], [entropy[k]])["score"][0] for k in (0, 150, 300)]
    np.testing.assert_array_equal(singles, base[[0, 150, 300]])


def test_second_batch_of_same_bucket_does_not_recompile():
    rng = np.random.default_rng(2)
    a1, h1 = _ragged(rng, 1000, 3)
    a2, h2 = _ragged(rng, 700, 3)
    fastuq.sauce_batch(a1, h1, dtype=np.float32)
    before = compiled_count()
    assert before > 0
    fastuq.sauce_batch(a2, h2, dtype=np.float32, q=0.2)  # new size and values, same bucket
    assert compiled_count() == before
    fastuq.sauce_batch([[0.5] * 23], [[0.1] * 23], dtype=np.float32)  # a new shape compiles
    assert compiled_count() > before


def test_float64_does_not_change_global_jax_config():
    # Whatever the user's setting (JAX_ENABLE_X64 may be on), a float64 call leaves it as is.
    for setting in (False, True):
        with jax.enable_x64(setting):
            fastuq.sauce_batch([[0.5]], [[0.1]], dtype=np.float64)
            assert jax.config.jax_enable_x64 == setting
    before = jax.config.jax_enable_x64
    fastuq.sauce_batch([[0.5]], [[0.1]], dtype=np.float64)
    assert jax.config.jax_enable_x64 == before


def test_per_trajectory_parameters_and_protocols():
    agreement = [[0.5, 1.0], [1.0], [0.25, 0.5, 1.0]]
    entropy = [[0.3, 0.1], [0.2], [0.9, 0.5, 0.1]]
    lam = np.array([0.9, 0.5, 0.99])
    out = fastuq.sauce_batch(agreement, entropy, protocol=["dylan", "debate", "dylan"], lam=lam)
    for k, proto in enumerate(["dylan", "debate", "dylan"]):
        ref = fastuq.sauce_score(agreement[k], entropy[k], proto, lam=lam[k])
        assert out["score"][k] == pytest.approx(ref, abs=1e-12)


def test_unknown_protocol_names_trajectory_unless_parameters_given():
    with pytest.raises(ValueError, match="trajectory 1: .*'chat'"):
        fastuq.sauce_batch([[0.5], [0.5]], [[0.1], [0.1]], protocol=["debate", "chat"])
    out = fastuq.sauce_batch([[0.5]], [[0.1]], protocol="chat", lam=0.9, q=0.1, sigma2_0=0.2,
                             mu_0=0.0)
    ref = fastuq.sauce_score([0.5], [0.1], lam=0.9, q=0.1, sigma2_0=0.2, mu_0=0.0)
    assert out["score"][0] == pytest.approx(ref, abs=1e-12)


@pytest.mark.parametrize(
    ("agreement", "entropy", "match"),
    [
        ([[0.5], [0.5, 1.5]], [[0.1], [0.1, 0.1]], r"trajectory 'b', round 1: agreement = 1.5"),
        ([[0.5], [0.5, -0.5]], [[0.1], [0.1, 0.1]], r"trajectory 'b', round 1: agreement"),
        ([[0.5], [None, 1.0]], [[0.1], [0.1, 0.1]], r"trajectory 'b', round 0: agreement = nan"),
        ([[0.5], [0.5, 1.0]], [[0.1], [0.1, np.nan]], r"'b', round 1: token_entropy = nan"),
        ([[0.5], [0.5, 1.0]], [[0.1], [0.1, -0.1]], r"'b', round 1: token_entropy = -0.1"),
        ([[0.5], [0.5, 1.0]], [[0.1], [0.1]], r"trajectory 1: .*2 rounds .*1"),
        ([[0.5], []], [[0.1], []], r"trajectory 'b': no executed round"),
        ([[0.5], ["x"]], [[0.1], [0.1]], r"not a number"),
    ],
)
def test_errors_name_trajectory_round_and_field(agreement, entropy, match):
    with pytest.raises(ValueError, match=match):
        ids = ["a", "b"]
        if "trajectory 1" in match:
            ids = None
        fastuq.sauce_batch(agreement, entropy, trajectory_ids=ids)


def test_first_error_in_trajectory_order_is_reported():
    a = np.array([[0.5, 2.0], [3.0, 0.5]])  # trajectory 0 round 1 and trajectory 1 round 0
    with pytest.raises(ValueError, match="trajectory 0, round 1"):
        fastuq.sauce_batch(a, np.full_like(a, 0.1))


def test_bad_arguments():
    with pytest.raises(ValueError, match="dtype"):
        fastuq.sauce_batch([[0.5]], [[0.1]], dtype=np.int32)
    with pytest.raises(ValueError, match="power of two"):
        fastuq.sauce_batch([[0.5]], [[0.1]], chunk_size=1000)
    with pytest.raises(ValueError, match="lam"):
        fastuq.sauce_batch([[0.5]], [[0.1]], lam=np.array([1.2]))
    with pytest.raises(ValueError, match="broadcast"):
        fastuq.sauce_batch([[0.5]], [[0.1]], q=np.array([0.1, 0.2]))
    with pytest.raises(ValueError, match="time-major"):
        fastuq.sauce_batch(np.zeros((2, 3)), np.zeros((3, 2)))
    with pytest.raises(ValueError, match="round_mask"):
        fastuq.sauce_batch(np.zeros((2, 3)), np.zeros((2, 3)), np.ones((2, 3), int))
    with pytest.raises(ValueError, match="backend"):
        fastuq.sauce_batch([[0.5]], [[0.1]], backend="torch")


def test_dylan_agreement_example_scores_like_scalar():
    # DyLAN: two unanimous survivors of three agents give 2/3 for the round.
    m = fastuq.majority_margin(["12", "12"], n_agents=3)
    out = fastuq.sauce_batch([[1.0, m]], [[0.2, 0.1]], protocol="dylan")
    assert out["score"][0] == pytest.approx(fastuq.sauce_score([1.0, 2 / 3], [0.2, 0.1], "dylan"))
