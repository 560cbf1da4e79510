"""Packing and validation on the device (fastuq.engine.device_pack, issue 12 item 3): the
device-packed arrays equal the host's bit for bit, the scores of ``pack="device"`` equal
``pack="host"``'s, agreement counts from answer codes equal a plain-Python count, and a bad
value gives the host's error (and skip list). Runs on whatever JAX's default backend is (a
CPU here, a GPU elsewhere)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fastuq
from fastuq.engine import device_pack as dp
from fastuq.engine.batch import Batch
from fastuq.engine.errors import RecordError
from fastuq.engine.inputs import INPUTS, Context
from fastuq.engine.runtime import bucket_size, local_devices
from fastuq.io.pack import pack_lists
from fastuq.signals import agreement_from_answers

DTYPES = (np.float32, np.float64)


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Same shape and dtype, NaN at the same places and the same bits everywhere else (so
    -0.0 is not 0.0)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind == "f":
        nan = np.isnan(a)
        if not np.array_equal(nan, np.isnan(b)):
            return False
        bits = f"u{a.dtype.itemsize}"
        return np.array_equal(a[~nan].view(bits), b[~nan].view(bits))
    return np.array_equal(a, b)


# --- strategies ---------------------------------------------------------------------------

values = st.one_of(st.just(0.0), st.just(1.0), st.floats(0, 1, width=64), st.none(),
                   st.floats(-2, 3), st.just(float("nan")))
rows = st.lists(st.one_of(st.none(), st.lists(values, min_size=0, max_size=6)),
                min_size=1, max_size=40)


@st.composite
def debates(draw, clean: bool = True):
    """A small corpus: ``(table, n)``; agreement in [0, 1] and entropy >= 0 when
    ``clean``, every trajectory with >= 1 round; one agent, T = 1 and zero entropy are
    drawn often."""
    n = draw(st.integers(1, 30))
    t_max = draw(st.sampled_from([1, 1, 2, 3, 5]))
    lengths = draw(st.lists(st.integers(1, t_max), min_size=n, max_size=n))
    team = draw(st.lists(st.sampled_from([1, 1, 2, 3, 4]), min_size=n, max_size=n))
    agree, ent = [], []
    for k, t in enumerate(lengths):
        counts = draw(st.lists(st.integers(1, team[k]), min_size=t, max_size=t))
        agree.append([c / team[k] for c in counts])
        ent.append(draw(st.lists(st.one_of(st.just(0.0), st.floats(0, 5)), min_size=t,
                                 max_size=t)))
    table = pa.table({
        "trajectory_id": [f"t{k}" for k in range(n)],
        "protocol": ["debate"] * n,
        "n_agents": pa.array(team, pa.int64()),
        "agreement": pa.array(agree, pa.list_(pa.float64())),
        "token_entropy": pa.array(ent, pa.list_(pa.float64())),
    })
    return table


@st.composite
def answer_corpora(draw):
    """``(answers list<list<string>>, n_agents [N] with nulls)``: ties, nulls, empty
    answers, silent slots, empty rounds and rounds wider than the pairwise count."""
    n = draw(st.integers(1, 25))
    alphabet = st.sampled_from(["1", "2", "3", "x", "", None])
    recs, team = [], []
    for _ in range(n):
        wide = draw(st.booleans()) and draw(st.booleans())
        a = draw(st.integers(1, 20 if wide else 4))
        size = draw(st.one_of(st.none(), st.just(a), st.integers(a, a + 2)))
        team.append(size)
        t = draw(st.integers(0, 3))
        if draw(st.integers(0, 9)) == 0:
            recs.append(None)
            continue
        recs.append([draw(st.lists(alphabet, min_size=0, max_size=a)) for _ in range(t)])
    return (pa.array(recs, pa.list_(pa.list_(pa.string()))), pa.array(team, pa.int64()))


# --- packing ------------------------------------------------------------------------------


@given(rows=rows, start=st.integers(0, 3))
def test_pack_lists_equals_host(rows, start):
    """Padded values and round mask, NaN padding and dtype cast included: bit for bit (a
    sliced column too: offsets that do not start at 0; null lists and null values)."""
    col = pa.array(rows, pa.list_(pa.float64())).slice(min(start, len(rows) - 1))
    n = len(col)
    for dtype in DTYPES:
        want, want_mask = pack_lists(col, dtype=dtype)
        got, got_mask = dp.pack_lists(col, dtype=dtype, pad=0.0)
        assert isinstance(got, dp.DeviceArray)
        assert got.shape == want.shape and got_mask.shape == want_mask.shape
        assert _bits_equal(np.asarray(got), want)
        assert np.array_equal(np.asarray(got_mask), want_mask)
        # the kernel's padding past N: 0 and no round, on a bucket-wide array
        width = bucket_size(n, dp.KERNEL_CHUNK, devices=len(local_devices()),
                            elements=want.shape[0])  # a multiple of the device count
        assert got.padded.shape == (want.shape[0], width)
        assert not np.asarray(got_mask.padded)[:, n:].any()
        assert (np.asarray(got.padded)[:, n:] == 0).all()


@given(rows=st.lists(st.lists(st.floats(-1e30, 1e30), min_size=1, max_size=4), min_size=1,
                     max_size=10))
def test_pack_int_and_float32_columns(rows):
    """The host's cast: float64 -> float32 rounding, int -> float."""
    ints = [[int(v) % 1000 for v in r] for r in rows]
    for col in (pa.array(rows, pa.list_(pa.float32())), pa.array(ints, pa.list_(pa.int64()))):
        for dtype in DTYPES:
            want, _ = pack_lists(col, dtype=dtype)
            got, _ = dp.pack_lists(col, dtype=dtype)
            assert _bits_equal(np.asarray(got), want)


def test_compiles_once_per_bucket():
    """Chunks of different sizes in one bucket (same T) reuse the compiled packer."""
    fn = dp._jitted("pack")
    dp.pack_flat(np.arange(10.0), [0, 5, 10], dtype=np.float64)
    before = fn._cache_size()
    for n in (3, 7, 100):
        dp.pack_flat(np.ones(5 * n), np.arange(0, 5 * n + 1, 5), dtype=np.float64)
    assert fn._cache_size() == before


# --- agreement from answer codes ----------------------------------------------------------


def _reference_counts(answers: pa.Array, classes: np.ndarray) -> list[int]:
    """Per executed round, the largest number of voting slots of one class (plain Python)."""
    flat = iter(zip(classes.tolist(), _flat_answers(answers), strict=True))
    out = []
    for rec in answers.to_pylist():
        for rnd in rec or []:
            votes = Counter()
            for _ in rnd:
                cls, text = next(flat)
                if text and cls >= 0:
                    votes[cls] += 1
            out.append(max(votes.values(), default=0))
    return out


def _flat_answers(answers: pa.Array) -> list:
    return [a for rec in answers.to_pylist() for rnd in (rec or []) for a in rnd]


@given(corpus=answer_corpora())
def test_agreement_from_codes_equals_host(corpus):
    """Counts (ties, nulls, empty answers, wide rounds) and the agreement values (dominant
    share over n_agents, else the round's slots; 0 without a vote) equal the host's; where
    the host raises, a device flag is set."""
    import pyarrow.compute as pc

    from fastuq.io.arrow_lists import list_lengths
    from fastuq.signals import answer_votes, read_n_agents

    answers, n_agents = corpus
    n = len(answers)
    table = pa.table({"trajectory_id": [f"t{k}" for k in range(n)], "answers": answers,
                      "n_agents": n_agents})
    classes = Batch(table).vote_classes()[1]
    rounds, _ = list_lengths(answers)
    per_round = pc.list_flatten(answers)
    slots, _ = list_lengths(per_round)
    codes = np.where(answer_votes(pc.list_flatten(per_round)) & (classes >= 0), classes, -1)
    team, known = read_n_agents(n_agents, n)
    for dtype in DTYPES:
        a, mask, flags, best = dp.agreement_from_codes(codes, slots, rounds, team, known,
                                                       dtype=dtype)
        assert np.asarray(best)[:len(slots)].tolist() == _reference_counts(answers, classes)
        try:
            want, want_mask = agreement_from_answers(answers, n_agents, classes=classes,
                                                     padded=True)
        except RecordError:
            assert flags.any()
            continue
        assert not flags.any()
        assert np.array_equal(np.asarray(mask), want_mask)
        assert _bits_equal(np.asarray(a), want.astype(dtype))


# --- the builders and the scores ----------------------------------------------------------


def _build(batch: Batch, name: str, inputs=("agreement", "token_entropy", "round_mask")):
    return INPUTS[name].build(Context(batch, {}, inputs))


@given(table=debates(), drop=st.sampled_from([None, "agreement"]))
def test_builders_pack_on_device(table, drop):
    """``Batch(pack="device")``'s agreement, round mask and token entropy are device arrays
    equal to the host builders' (agreement from the answers too)."""
    if drop:  # agreement from answers: every agent votes the class of its count
        answers = [[["a"] * round(x * k) + ["b"] * (k - round(x * k)) for x in rec]
                   for rec, k in zip(table.column("agreement").to_pylist(),
                                     table.column("n_agents").to_pylist(), strict=True)]
        table = table.drop_columns([drop]).append_column(
            "answers", pa.array(answers, pa.list_(pa.list_(pa.string()))))
    for dtype in DTYPES:
        host, device = Batch(table, dtype=dtype), Batch(table, dtype=dtype, pack="device")
        for name in ("agreement", "token_entropy", "round_mask"):
            got = _build(device, name)
            assert isinstance(got, dp.DeviceArray), name
            assert _bits_equal(np.asarray(got), _build(host, name)), name


@given(table=debates())
def test_scores_bit_identical(table):
    """SAUCE (and the agreement baselines) score the same bits with pack='device'."""
    methods = "sauce,mean_agreement,weighted_agreement"
    for dtype in ("float32", "float64"):
        want = fastuq.score(table, methods, dtype=dtype, pack="host")
        got = fastuq.score(table, methods, dtype=dtype, pack="device")
        for m in methods.split(","):
            assert _bits_equal(got.column(m).to_numpy(), want.column(m).to_numpy()), m


def test_pipeline_packs_on_device_when_asked():
    """iter_scores(pack="device") scores from device-packed inputs; pack="host" never packs
    there, and "auto" packs there exactly when the kernels run on a GPU."""
    from fastuq.engine.scoring import iter_scores

    table = pa.table({"trajectory_id": ["a", "b"], "protocol": ["debate"] * 2,
                      "agreement": pa.array([[0.5, 1.0], [1.0]]),
                      "token_entropy": pa.array([[0.1, 0.0], [0.3]])})
    for pack, expect in (("device", True), ("host", False), ("auto", dp.on_gpu())):
        for batch, _ in iter_scores(table, pack=pack):
            assert batch.device_pack is expect
            assert (batch._cache.get("device:token_entropy") is not None) is expect


def test_entropy_from_noise_and_topk_bit_identical():
    """Token entropy from the observation noise or from top-k log-probabilities, packed on
    the device: the host's arrays and scores."""
    from fastuq import synth

    table = synth.corpus(300, protocol="mixed", seed=3, topk=2)
    for source, kw in ((table.drop_columns(["token_entropy", "topk_logprobs"]),
                        {"observation_noise": 0.3}),
                       (table.drop_columns(["token_entropy"]), {})):
        for dtype in DTYPES:
            noise = kw.get("observation_noise")
            host = Batch(source, dtype=dtype, observation_noise=noise)
            device = Batch(source, dtype=dtype, observation_noise=noise, pack="device")
            got = _build(device, "token_entropy")
            assert isinstance(got, dp.DeviceArray)
            assert _bits_equal(np.asarray(got), _build(host, "token_entropy"))
            want = fastuq.score(source, "sauce", dtype=dtype, pack="host", **kw)
            out = fastuq.score(source, "sauce", dtype=dtype, pack="device", **kw)
            assert _bits_equal(out.column("sauce").to_numpy(), want.column("sauce").to_numpy())


def test_sample_all_methods_bit_identical(tmp_path):
    """The bundled sample, every method, agreement given and built from answers."""
    import pyarrow.parquet as pq

    from fastuq.cli import sample_corpus_path

    table = pq.read_table(sample_corpus_path())
    for source in (table, table.drop_columns(["agreement"])):
        for dtype in ("float32", "float64"):
            want = fastuq.score(source, "all", dtype=dtype, pack="host", chunk_rows=700)
            got = fastuq.score(source, "all", dtype=dtype, pack="device", chunk_rows=700)
            assert got.column_names == want.column_names
            for m in want.column_names:
                if m not in ("trajectory_id", "question_id", "protocol", "correct"):
                    assert _bits_equal(got.column(m).to_numpy(), want.column(m).to_numpy()), m


def _corrupt(table: pa.Table, column: str, k: int, round_values) -> pa.Table:
    col = table.column(column).to_pylist()
    col[k] = round_values
    i = table.column_names.index(column)
    return table.set_column(i, column, pa.array(col, table.schema.field(column).type))


BAD = [
    ("agreement", [float("nan")]),
    ("agreement", [0.5, 1.5]),
    ("agreement", [-0.25]),
    ("agreement", []),
    ("agreement", None),
    ("token_entropy", [-1.0]),
    ("token_entropy", [float("inf")]),
    ("token_entropy", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]),
]


@pytest.mark.parametrize(("column", "bad"), BAD)
@pytest.mark.parametrize("dtype", DTYPES)
def test_bad_values_raise_the_host_error(column, bad, dtype):
    """A flag set on the device: the host path builds the chunk and raises its message."""
    table = pa.table({
        "trajectory_id": ["a", "b", "c"],
        "agreement": pa.array([[0.5, 1.0], [1.0], [0.25, 0.5, 0.75]], pa.list_(pa.float64())),
        "token_entropy": pa.array([[0.1, 0.0], [0.3], [0.2, 0.1, 0.0]],
                                  pa.list_(pa.float64())),
    })
    table = _corrupt(table, column, 1, bad)
    messages = []
    for pack in ("host", "device"):
        batch = Batch(table, dtype=dtype, pack=pack)
        with pytest.raises(RecordError) as err:
            for name in ("agreement", "token_entropy"):
                _build(batch, name)
        messages.append((str(err.value), err.value.row))
        if pack == "device":
            assert dp.checked_rounds(batch, "agreement" if column == "agreement"
                                     else "token_entropy") is None
    assert messages[0] == messages[1]


def test_bad_team_from_answers_raises_the_host_error():
    """Agreement from answers: a round wider than n_agents is the host's RecordError."""
    answers = pa.array([[["1", "1"]], [["1", "2", "2"]]], pa.list_(pa.list_(pa.string())))
    table = pa.table({"trajectory_id": ["a", "b"], "answers": answers,
                      "n_agents": pa.array([2, 2], pa.int64())})
    messages = []
    for pack in ("host", "device"):
        with pytest.raises(RecordError) as err:
            _build(Batch(table, pack=pack), "agreement")
        messages.append(str(err.value))
    assert messages[0] == messages[1] and "more than n_agents" in messages[0]


def test_skip_accounting_is_the_hosts(tmp_path):
    """``on_error="skip"``: the same records skipped for the same reasons, the same
    scores."""
    table = pa.table({
        "trajectory_id": [f"t{k}" for k in range(6)],
        "protocol": ["debate"] * 6,
        "agreement": pa.array([[0.5], [float("nan")], [1.0, 0.5], [], [0.25], [2.0]],
                              pa.list_(pa.float64())),
        "token_entropy": pa.array([[0.1], [0.2], [0.3, -1.0], [], [0.0], [0.1]],
                                  pa.list_(pa.float64())),
    })
    import pyarrow.parquet as pq

    path = tmp_path / "c.parquet"
    pq.write_table(table, path)
    reports = {}
    for pack in ("host", "device"):
        out = tmp_path / f"{pack}.parquet"
        reports[pack] = fastuq.score_file(path, out, on_error="skip", pack=pack,
                                          keep_scores=True)
    host, device = reports["host"], reports["device"]
    assert [(s.row, s.reason) for s in device.skipped] == [(s.row, s.reason)
                                                           for s in host.skipped]
    assert _bits_equal(device.scores["sauce"], host.scores["sauce"])
    assert pq.read_table(tmp_path / "device.parquet").equals(
        pq.read_table(tmp_path / "host.parquet"))


# --- options ------------------------------------------------------------------------------


def test_pack_and_dtype_options():
    table = pa.table({"trajectory_id": ["a"], "agreement": pa.array([[0.5]]),
                      "token_entropy": pa.array([[0.1]]), "protocol": ["debate"]})
    with pytest.raises(ValueError, match="pack must be one of"):
        fastuq.score(table, pack="gpu")
    with pytest.raises(ValueError, match="pack must be one of"):
        Batch(table, pack="sometimes")
    with pytest.raises(ValueError, match="backend='numpy'"):
        fastuq.score(table, pack="device", backend="numpy")
    assert dp.resolve_pack("auto") == dp.on_gpu()
    assert dp.resolve_pack("auto", backend="numpy") is False
    assert dp.default_dtype(None) == (np.float32 if dp.on_gpu() else np.float64)
    assert dp.default_dtype("float64") == np.float64  # explicit wins
    assert dp.default_dtype(np.float32) == np.float32
    with pytest.raises(ValueError, match="dtype must be"):
        dp.default_dtype("float16")
    # the default dtype is the device's: float64 scores on a CPU equal dtype="float64"
    want = "float32" if dp.on_gpu() else "float64"
    assert fastuq.score(table).equals(fastuq.score(table, dtype=want))


def test_cli_pack_option(tmp_path):
    import pyarrow.parquet as pq

    from fastuq.cli import main, sample_corpus_path

    out = {}
    for pack in ("host", "device"):
        path = tmp_path / f"{pack}.parquet"
        assert main(["score", str(sample_corpus_path()), "-o", str(path), "--pack", pack,
                     "--dtype", "float64"]) == 0
        out[pack] = pq.read_table(path)
    assert out["device"].equals(out["host"])
    with pytest.raises(SystemExit):
        main(["score", str(sample_corpus_path()), "--pack", "gpu"])
