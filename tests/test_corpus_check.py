"""``check="corpus"`` (the default, ``--check corpus``): the values of every checked column
the corpus has are checked whichever methods run (fastuq.engine.scoring, fastuq.engine.skip),
with the rules of the inputs built from them; ``check="used"`` stays the opt-out."""

from __future__ import annotations

import copy
import math

import pyarrow as pa
import pytest

import fastuq
from fastuq.cli import main


def _table(**spoil) -> pa.Table:
    """Three debate trajectories of two rounds with every checked column; ``spoil``:
    column -> value put at trajectory 'b' (row 1), round 1, agent 2 (round 1 for the
    per-round columns)."""
    cols = {
        "trajectory_id": ["a", "b", "c"],
        "protocol": ["debate"] * 3,
        "n_agents": pa.array([3, 3, 3], pa.int32()),
        "correct": [True, False, True],
        "agreement": [[2 / 3, 1.0]] * 3,
        "token_entropy": [[0.4, 0.2]] * 3,
        "answers": [[["1", "1", "2"], ["1", "1", "1"]]] * 3,
        "seq_logprob": [[[-1.0, -2.0, -3.0], [-1.0, -2.0, -0.5]]] * 3,
        "n_tokens": [[[10, 12, 9], [8, 8, 8]]] * 3,
        "belief": [[[0.9, 0.8, 0.4], [0.9, 0.9, 0.7]]] * 3,
        "answer_logprob": [[[-0.1, -0.2, -0.9], [-0.1, -0.1, -0.3]]] * 3,
    }
    # the three records share their lists above: copy each one
    cols = {k: [copy.deepcopy(r) for r in v] for k, v in cols.items()}
    for name, value in spoil.items():
        if name in ("agreement", "token_entropy"):
            cols[name][1][1] = value
        else:
            cols[name][1][1][2] = value
    types = {"n_tokens": pa.list_(pa.list_(pa.int32()))}
    return pa.table({k: pa.array(v, types.get(k)) if k in types else v
                     for k, v in cols.items()})


CASES = [
    ("seq_logprob", 0.7, r"agent 2: seq_logprob = 0.7 is not a finite log-probability <= 0"),
    ("seq_logprob", math.nan, r"agent 2: seq_logprob = nan is not a finite log-probability"),
    ("n_tokens", -4, r"agent 2: n_tokens = -4.0 is below 1"),
    ("n_tokens", 0, r"agent 2: n_tokens = 0.0 is below 1"),
    ("belief", 1.5, r"agent 2: belief = 1.5 is not a finite probability in \[0, 1\]"),
    ("answer_logprob", 0.2, r"agent 2: answer_logprob = 0.2 is not a finite log-probability"),
]


@pytest.mark.parametrize("column, value, match", CASES)
def test_sauce_run_checks_the_node_columns_it_does_not_read(column, value, match):
    table = _table(**{column: value})
    with pytest.raises(ValueError, match=r"trajectory 'b' \(.*row 1\), round 1, " + match):
        fastuq.score(table, "sauce")
    # --check used: SAUCE reads none of them, so the run scores what it reads
    got = fastuq.score(table, "sauce", check="used")["sauce"].to_pylist()
    assert got == fastuq.score(_table(), "sauce")["sauce"].to_pylist()


@pytest.mark.parametrize("column, value, match", [
    ("agreement", 1.5, r"round 1: agreement = 1.5 is outside \[0, 1\]"),
    ("agreement", math.nan, r"round 1: agreement = nan is missing or not finite"),
    ("token_entropy", -0.25, r"round 1: token_entropy = -0.25 is negative"),
])
def test_umas_run_checks_the_round_signals_it_does_not_read(column, value, match):
    table = _table(**{column: value})
    with pytest.raises(ValueError, match=r"trajectory 'b' \(.*row 1\), " + match):
        fastuq.score(table, "umas")
    assert len(fastuq.score(table, "umas", check="used")) == 3


def test_cli_names_the_record_and_skip_leaves_it_out(tmp_path, capsys):
    import pyarrow.parquet as pq

    src = tmp_path / "c.parquet"
    pq.write_table(_table(seq_logprob=0.7), src)
    out = tmp_path / "s.parquet"
    # an error, not a score: exit 1 from inside the run on this branch, 2 (an input error)
    # under the one exit-status rule of fastuq.cli on main
    assert main(["score", str(src), "-o", str(out), "--method", "sauce"]) in (1, 2)
    err = capsys.readouterr().err
    assert "c.parquet row 1), round 1, agent 2: seq_logprob = 0.7" in err
    assert "trajectory 'b' (" in err
    assert not out.exists()
    assert main(["score", str(src), "-o", str(out), "--method", "sauce", "--on-error", "skip"]
                ) == 0
    assert pq.read_table(out)["trajectory_id"].to_pylist() == ["a", "c"]
    listed = (tmp_path / "s.parquet.skipped.jsonl").read_text()
    assert '"trajectory_id":"b"' in listed.replace(" ", "") and "seq_logprob = 0.7" in listed


def test_a_clean_corpus_scores_the_same_under_both_checks():
    table = _table()
    for m in ("sauce", "umas", "perplexity_final", "bccs"):
        a = fastuq.score(table, m)
        b = fastuq.score(table, m, check="used")
        assert a.equals(b), m
