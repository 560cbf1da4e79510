"""Tests of fastuq.synth: schema, consistency against plain-Python recomputation, the DyLAN
protocol, determinism, signal strength, writing and the command line."""

from __future__ import annotations

import ast
import math
import os
import subprocess
import sys
from collections import Counter
from importlib.resources import files

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from fastuq import synth
from fastuq.synth import corpus, corpus_chunks, write

REL = 1e-9  # float64 sums recomputed in another order
# Floats of two runs of the simulator on different machines: NumPy's exp/log (and so every
# simulated log-probability and entropy) differ in the last bits between its SIMD builds
# (AVX-512 vs AVX2: up to 2.4 ulp, 874 of the sample's 2000 rows). 1e-12 relative is ~4500
# ulp, far above that and far below any change of the simulation itself.
MACHINE_RTOL = 1e-12

EXPECTED_TYPES = {
    "trajectory_id": pa.string(),
    "question_id": pa.string(),
    "protocol": pa.string(),
    "n_agents": pa.int32(),
    "reference": pa.string(),
    "final_answer": pa.string(),
    "correct": pa.bool_(),
    "agreement": pa.list_(pa.float64()),
    "token_entropy": pa.list_(pa.float64()),
    "answers": pa.list_(pa.list_(pa.string())),
    "seq_logprob": pa.list_(pa.list_(pa.float64())),
    "n_tokens": pa.list_(pa.list_(pa.int32())),
    "flags": pa.list_(pa.string()),
}
TOPK_TYPES = {
    "token_logprobs": pa.list_(pa.list_(pa.list_(pa.float32()))),
    "topk_logprobs": pa.list_(pa.list_(pa.list_(pa.list_(pa.float32())))),
}


# --- plain-Python references ---------------------------------------------------------------

def modal(answers: list[str | None]) -> tuple[str | None, int]:
    """Most frequent non-null answer (first one in slot order on ties) and its count."""
    c = Counter(a for a in answers if a is not None)
    if not c:
        return None, 0
    return c.most_common(1)[0]


def token_entropy(logprobs: list[float]) -> float:
    """Entropy (nats) of the renormalised top-k distribution of one token."""
    m = max(logprobs)
    z = sum(math.exp(x - m) for x in logprobs)
    logz = math.log(z)
    return -sum(math.exp(x - m - logz) * (x - m - logz) for x in logprobs)


def check_record(r: dict, topk: int) -> None:
    """Every invariant of one record, recomputed without the simulator's code."""
    tid = r["trajectory_id"]
    a_n = r["n_agents"]
    rounds = len(r["answers"])
    assert rounds >= 1, tid
    for col in ("agreement", "token_entropy", "seq_logprob", "n_tokens"):
        assert len(r[col]) == rounds, (tid, col)
    assert r["flags"] == []
    for t in range(rounds):
        ans, lp, nt = r["answers"][t], r["seq_logprob"][t], r["n_tokens"][t]
        assert len(ans) == len(lp) == len(nt) == a_n, (tid, t)
        spoke = [x is not None for x in lp]
        assert spoke == [x is not None for x in nt], (tid, t)
        # a parsed answer implies the agent spoke; each round holds a parsed answer
        assert all(s for s, x in zip(spoke, ans, strict=True) if x is not None), (tid, t)
        _, top = modal(ans)
        assert top >= 1, (tid, t)
        assert r["agreement"][t] == top / a_n, (tid, t)
        assert all(x <= 0 for x in lp if x is not None), (tid, t)
        assert all(x >= 1 for x in nt if x is not None), (tid, t)
        ent = r["token_entropy"][t]
        assert math.isfinite(ent) and ent >= 0, (tid, t)
        if topk:
            toks, tk = r["token_logprobs"][t], r["topk_logprobs"][t]
            assert len(toks) == len(tk) == a_n
            per_resp = []
            for a in range(a_n):
                if not spoke[a]:
                    assert toks[a] is None and tk[a] is None, (tid, t, a)
                    continue
                assert len(toks[a]) == len(tk[a]) == nt[a], (tid, t, a)
                for chosen, row in zip(toks[a], tk[a], strict=True):
                    assert len(row) == topk
                    assert all(x <= 0 for x in row)
                    assert all(row[i] >= row[i + 1] for i in range(topk - 1))
                    assert chosen in row
                assert lp[a] == pytest.approx(math.fsum(toks[a]), rel=REL, abs=1e-12)
                per_resp.append(sum(token_entropy(row) for row in tk[a]) / len(tk[a]))
            assert ent == pytest.approx(sum(per_resp) / len(per_resp), rel=REL, abs=1e-15)
    final, _ = modal(r["answers"][-1])
    assert r["final_answer"] == final, tid
    assert r["correct"] == (final == r["reference"]), tid


def check_table(table: pa.Table, topk: int) -> list[dict]:
    rows = table.to_pylist()
    for r in rows:
        check_record(r, topk)
    assert len({r["trajectory_id"] for r in rows}) == len(rows)
    return rows


def dylan_shape_ok(r: dict) -> None:
    """The DyLAN protocol, re-derived from a record's answers (team of 4, 3 rounds)."""
    tid = r["trajectory_id"]
    rounds = len(r["answers"])
    assert r["n_agents"] == 4 and 1 <= rounds <= 3, tid
    for t in range(min(rounds, 2)):
        spoke = [x is not None for x in r["n_tokens"][t]]
        m = sum(spoke)
        assert spoke == [True] * m + [False] * (4 - m) and m >= 3, (tid, t)
        ans = r["answers"][t]

        def consensus(k: int, ans: list[str | None] = ans) -> bool:
            return modal(ans[:k])[1] > (2 * k) // 3

        # nobody stops before the first check, every earlier check failed
        assert not any(consensus(k) for k in range(3, m)), (tid, t)
        last = t == rounds - 1
        if last:
            assert consensus(m), (tid, t)  # the run stopped here because of a consensus
        else:
            assert m == 4 and not consensus(4), (tid, t)
    if rounds == 3:
        assert sum(x is not None for x in r["n_tokens"][2]) == 2, tid


# --- schema and shapes -----------------------------------------------------------------------

def test_schema_types_exact():
    t = corpus(30, protocol="mixed", seed=0)
    assert {f.name: f.type for f in t.schema} == EXPECTED_TYPES
    assert t.schema == synth.schema()
    tk = corpus(10, protocol="dylan", seed=0, topk=3)
    assert {f.name: f.type for f in tk.schema} == EXPECTED_TYPES | TOPK_TYPES
    assert tk.schema == synth.schema(topk=True)
    assert corpus(0).num_rows == 0 and corpus(0).schema == synth.schema()


def test_consistency_mixed_no_topk():
    rows = check_table(corpus(400, protocol="mixed", seed=1), topk=0)
    assert [r["protocol"] for r in rows[:4]] == ["debate", "dylan", "debate", "dylan"]
    for r in rows:
        if r["protocol"] == "debate":
            assert r["n_agents"] == 3 and len(r["answers"]) == 3
            assert all(x is not None for rnd in r["n_tokens"] for x in rnd)
        else:
            dylan_shape_ok(r)


def test_consistency_topk_exact_entropy_and_logprob():
    rows = check_table(corpus(160, protocol="mixed", seed=2, topk=5), topk=5)
    n_tok = [x for r in rows for rnd in r["n_tokens"] for x in rnd if x is not None]
    assert 5 <= np.mean(n_tok) <= 12  # small responses when top-k is on


def test_dylan_shapes_early_stop_and_pruning():
    rows = check_table(corpus(600, protocol="dylan", seed=4), topk=0)
    for r in rows:
        dylan_shape_ok(r)
    one_round_three = [r for r in rows if len(r["answers"]) == 1
                       and sum(x is not None for x in r["answers"][0]) == 3
                       and sum(x is not None for x in r["n_tokens"][0]) == 3]
    pruned_two = [r for r in rows if len(r["answers"]) == 3
                  and sum(x is not None for x in r["answers"][2]) == 2]
    assert len(one_round_three) > 20 and len(pruned_two) > 20
    for r in one_round_three:  # the 4th agent did not speak: null in every node column
        assert r["answers"][0][3] is None and r["seq_logprob"][0][3] is None
        assert r["n_tokens"][0][3] is None
        assert r["agreement"] == [0.75]
    assert Counter(len(r["answers"]) for r in rows).keys() == {1, 2, 3}


def test_custom_team_sizes():
    check_table(corpus(60, protocol="debate", seed=3, n_agents=5, n_rounds=4), topk=0)
    rows = check_table(corpus(120, protocol="dylan", seed=3, n_agents=6, n_rounds=4), topk=0)
    assert all(r["n_agents"] == 6 and len(r["answers"]) <= 4 for r in rows)


@settings(max_examples=12, deadline=None)
@given(
    n=st.integers(1, 40),
    protocol=st.sampled_from(synth.PROTOCOLS),
    seed=st.integers(0, 2**32),
    n_agents=st.one_of(st.none(), st.integers(1, 6)),
    n_rounds=st.integers(1, 4),
    topk=st.sampled_from([0, 0, 1, 4]),
    per_id=st.integers(1, 4),
    p_unparsed=st.sampled_from([0.0, 0.03, 0.5]),
)
def test_consistency_property(n, protocol, seed, n_agents, n_rounds, topk, per_id, p_unparsed):
    t = corpus(n, protocol=protocol, seed=seed, n_agents=n_agents, n_rounds=n_rounds,
               topk=topk, questions_per_id=per_id, p_unparsed=p_unparsed)
    assert t.num_rows == n
    rows = check_table(t, topk)
    for r in rows:
        assert len(r["answers"]) <= n_rounds


def test_unparseable_fraction_is_small_but_present():
    t = corpus(3000, protocol="debate", seed=7)
    ans = pc.list_flatten(pc.list_flatten(t["answers"]))
    frac = ans.null_count / len(ans)  # every debate agent speaks: nulls are unparseable
    assert 0.01 < frac < 0.06


def test_questions_per_id_groups_across_chunks(monkeypatch):
    monkeypatch.setattr(synth.rollouts, "_CHUNK", 100)  # chunk boundaries inside the corpus
    t = corpus(1000, protocol="mixed", seed=5, questions_per_id=3)
    qids = t["question_id"].to_pylist()
    refs = t["reference"].to_pylist()
    counts = Counter(qids)
    assert sorted(counts.values()) == [1] + [3] * 333
    ref_of = {}
    for q, ref in zip(qids, refs, strict=True):
        assert ref_of.setdefault(q, ref) == ref
    assert qids[:6] == [qids[0]] * 3 + [qids[3]] * 3 and qids[0] != qids[3]


# --- determinism ---------------------------------------------------------------------------

def test_deterministic_same_args_and_seeds_differ():
    kw = dict(protocol="mixed", questions_per_id=2)
    a = corpus(3000, seed=11, **kw)
    assert a.equals(corpus(3000, seed=11, **kw))
    b = corpus(3000, seed=12, **kw)
    assert not a.equals(b)
    assert a["answers"].to_pylist() != b["answers"].to_pylist()
    tk = corpus(50, seed=3, topk=4, protocol="dylan")
    assert tk.equals(corpus(50, seed=3, topk=4, protocol="dylan"))


def test_chunks_concatenate_to_corpus(monkeypatch):
    monkeypatch.setattr(synth.rollouts, "_CHUNK", 64)
    parts = list(corpus_chunks(300, protocol="dylan", seed=2))
    assert len(parts) == 5
    assert pa.concat_tables(parts).equals(corpus(300, protocol="dylan", seed=2))
    assert pa.concat_tables(parts)["trajectory_id"].to_pylist()[64] == "t000064"


def _leaves(arr: pa.Array, path: str) -> list[tuple[str, pa.Array]]:
    """(path, leaf values) of a possibly nested list column; list lengths and nulls at every
    level are asserted equal by the caller through the ``.len`` / ``.valid`` entries."""
    out = [(f"{path}.valid", arr.is_valid())]
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        out.append((f"{path}.len", pc.list_value_length(arr).fill_null(-1)))
        out += _leaves(pc.list_flatten(arr), f"{path}[]")
    else:
        out.append((path, arr))
    return out


def assert_tables_match(got: pa.Table, want: pa.Table, rtol: float = MACHINE_RTOL) -> None:
    """Equal schemas, list lengths, nulls, integers, strings and booleans exactly; floats to
    ``rtol`` (relative, NaN equal to NaN)."""
    assert got.schema == want.schema
    assert got.num_rows == want.num_rows
    for name in want.column_names:
        pairs = zip(_leaves(got[name].combine_chunks(), name),
                    _leaves(want[name].combine_chunks(), name), strict=True)
        for (path, g), (_, w) in pairs:
            if pa.types.is_floating(w.type):
                ok = w.is_valid().to_numpy(zero_copy_only=False)
                np.testing.assert_allclose(
                    g.to_numpy(zero_copy_only=False)[ok], w.to_numpy(zero_copy_only=False)[ok],
                    rtol=rtol, atol=0, err_msg=path)
            else:
                assert g.equals(w), path


def test_bundled_sample_matches_regeneration():
    path = files("fastuq") / "data" / "sample.parquet"
    committed = pq.read_table(str(path))
    assert_tables_match(corpus(2000, protocol="mixed", seed=0), committed)


def test_sample_regenerated_without_avx512_matches(tmp_path):
    # NumPy's AVX-512 exp/log switched off, as on a CPU without AVX-512: the floats move in
    # their last bits (on an AVX-512 machine), nothing else may.
    out = tmp_path / "no_avx512.parquet"
    code = ("import sys; from fastuq.synth import corpus, write; "
            "write(corpus(2000, protocol='mixed', seed=0), sys.argv[1])")
    env = dict(os.environ, NPY_DISABLE_CPU_FEATURES=" ".join(_avx512_dispatch_features()))
    res = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    regenerated = pq.read_table(out)
    committed = pq.read_table(str(files("fastuq") / "data" / "sample.parquet"))
    assert_tables_match(regenerated, committed)


def _avx512_dispatch_features() -> list[str]:
    """The AVX-512 targets this NumPy dispatches to on this machine (empty without AVX-512)."""
    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:  # NumPy 1.x
        from numpy.core import _multiarray_umath as umath
    return [f for f in umath.__cpu_dispatch__
            if umath.__cpu_features__.get(f) and f not in umath.__cpu_baseline__
            and (f.startswith("AVX512") or f == "X86_V4")]


def test_assert_tables_match_tolerates_ulps_and_nothing_else():
    t = corpus(40, protocol="dylan", seed=3, topk=2)

    def with_column(name, rows):
        return t.set_column(t.column_names.index(name), name,
                            pa.array(rows, t.schema.field(name).type))

    lp = t["seq_logprob"].to_pylist()
    ulp = [[[None if x is None else float(np.nextafter(x, 0.0)) for x in a] for a in r]
           for r in lp]
    assert_tables_match(with_column("seq_logprob", ulp), t)
    off = [[[None if x is None else x * (1 + 1e-9) for x in a] for a in r] for r in lp]
    with pytest.raises(AssertionError, match="seq_logprob"):
        assert_tables_match(with_column("seq_logprob", off), t)
    shorter = [[a[:-1] if k == 0 else a for k, a in enumerate(r)] for r in lp]
    with pytest.raises(AssertionError, match=r"seq_logprob\[\]"):
        assert_tables_match(with_column("seq_logprob", shorter), t)
    for name, change in (("n_agents", lambda v: v + 1), ("final_answer", lambda v: f"{v}x"),
                         ("correct", lambda v: not v)):
        rows = t[name].to_pylist()
        rows[7] = change(rows[7])
        with pytest.raises(AssertionError, match=name):
            assert_tables_match(with_column(name, rows), t)
    nulled = t["token_entropy"].to_pylist()
    nulled[5] = None
    with pytest.raises(AssertionError, match="token_entropy.valid"):
        assert_tables_match(with_column("token_entropy", nulled), t)


# --- realism -------------------------------------------------------------------------------

def _row_mean(col: pa.ChunkedArray) -> np.ndarray:
    """Mean per row of the non-null leaves of a list<float64> or list<list<float64>> column."""
    arr = col.combine_chunks()
    owner = np.arange(len(arr))
    while pa.types.is_list(arr.type):
        owner = owner[pc.list_parent_indices(arr).to_numpy()]
        arr = arr.flatten()
    ok = ~arr.is_null().to_numpy(zero_copy_only=False)
    v = arr.fill_null(0).to_numpy()
    n = len(col)
    return np.bincount(owner[ok], v[ok], n) / np.bincount(owner[ok], None, n)


def test_signal_band_debate_20k():
    t = corpus(20_000, protocol="debate", seed=0)
    y = t["correct"].to_numpy()
    acc = y.mean()
    auroc_agree = roc_auc_score(y, _row_mean(t["agreement"]))  # score -mean(agreement)
    auroc_ent = roc_auc_score(y, -_row_mean(t["token_entropy"]))
    auroc_lp = roc_auc_score(y, _row_mean(t["seq_logprob"]))
    assert 0.5 <= acc <= 0.8
    assert 0.65 <= auroc_agree <= 0.85
    assert 0.55 <= auroc_ent <= 0.85  # real but imperfect
    assert 0.55 <= auroc_lp <= 0.85
    # agents move toward the majority: agreement rises over rounds
    agree = t["agreement"].combine_chunks().flatten().to_numpy().reshape(-1, 3).mean(axis=0)
    assert agree[0] < agree[1] < agree[2]


def test_wrong_consensus_happens():
    rows = corpus(2000, protocol="debate", seed=9).to_pylist()
    wrong_unanimous = [r for r in rows if r["agreement"][-1] == 1.0 and not r["correct"]]
    assert len(wrong_unanimous) > 20


# --- writing, command line, imports, errors ------------------------------------------------

def test_write_atomic_table_and_stream(tmp_path):
    t = corpus(200, protocol="mixed", seed=1)
    out = write(t, tmp_path / "sub" / "a.parquet")
    assert out == tmp_path / "sub" / "a.parquet"
    assert pq.read_table(out).equals(t)
    write(corpus_chunks(200, protocol="mixed", seed=1), out)  # overwrite with a stream
    assert pq.read_table(out).equals(t)

    def broken():
        yield t
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write(broken(), out)
    assert pq.read_table(out).equals(t)  # the old file survives a failed write
    assert sorted(p.name for p in out.parent.iterdir()) == ["a.parquet"]  # no temp left


def test_cli_writes_file(tmp_path):
    out = tmp_path / "c.parquet"
    cmd = [sys.executable, "-m", "fastuq.synth", "--n", "300", "--protocol", "dylan",
           "--seed", "3", "--topk", "2", "-o", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert pq.read_table(out).equals(corpus(300, protocol="dylan", seed=3, topk=2))


def test_cli_bad_arguments(tmp_path, capsys):
    with pytest.raises(SystemExit):
        synth.main(["--n", "5", "--protocol", "nope", "-o", str(tmp_path / "x.parquet")])
    assert synth.main(["--n", "-3", "-o", str(tmp_path / "x.parquet")]) == 2
    assert "n must be" in capsys.readouterr().err
    assert synth.main(["--n", "0", "-o", str(tmp_path / "e.parquet")]) == 0
    assert pq.read_table(tmp_path / "e.parquet").num_rows == 0


def test_no_jax_import(tmp_path):
    # The installed package's own files (a wheel or an editable install alike).
    pkg = files("fastuq") / "synth"
    sources = sorted((p for p in pkg.iterdir() if p.name.endswith(".py")), key=lambda p: p.name)
    assert len(sources) >= 2, sources
    for src in sources:
        for node in ast.walk(ast.parse(src.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                assert not any(a.name.split(".")[0] == "jax" for a in node.names), src
            elif isinstance(node, ast.ImportFrom):
                assert (node.module or "").split(".")[0] != "jax", src
    code = ("import sys, fastuq; had = set(sys.modules); import fastuq.synth; "
            "print(sorted(m for m in set(sys.modules) - had if m.split('.')[0] in "
            "('jax', 'jaxlib')))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


@pytest.mark.parametrize("kw", [
    dict(n=-1), dict(n=5, protocol="chat"), dict(n=5, seed=-2), dict(n=5, n_rounds=0),
    dict(n=5, topk=-1), dict(n=5, questions_per_id=0), dict(n=5, p_unparsed=1.0),
    dict(n=5, n_agents=0), dict(n=5, n_tokens_mean=0.5), dict(n=5, n_distractors=0),
])
def test_bad_arguments_raise_value_error(kw):
    with pytest.raises(ValueError, match="synth"):
        corpus(**kw)
