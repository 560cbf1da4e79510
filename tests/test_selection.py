"""Best-of-K selection (fastuq.selection) against a plain per-question loop."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastuq.cli import main
from fastuq.selection import best_of_k, select_best


def _loop_select(qids, scores):
    best = {}
    for k, (q, s) in enumerate(zip(qids, scores, strict=True)):
        if q not in best or s < scores[best[q]]:
            best[q] = k
    return [best[q] for q in dict.fromkeys(qids)]


@given(st.lists(st.tuples(st.sampled_from("abcde"), st.sampled_from([0.0, 0.5, 1.0, 2.0]),
                          st.booleans()), min_size=1, max_size=40))
def test_select_best_matches_loop_with_ties(rows):
    qids = [r[0] for r in rows]
    scores = np.array([r[1] for r in rows])
    assert select_best(qids, scores).tolist() == _loop_select(qids, list(scores))
    correct = np.array([r[2] for r in rows])
    res = best_of_k(qids, {"s": scores}, correct)
    chosen = _loop_select(qids, list(scores))
    assert res["selected"]["s"] == pytest.approx(correct[chosen].mean())
    groups = {q: [c for qq, c in zip(qids, correct, strict=True) if qq == q] for q in qids}
    assert res["oracle"] == pytest.approx(np.mean([any(g) for g in groups.values()]))
    assert res["random"] == pytest.approx(np.mean([np.mean(g) for g in groups.values()]))
    assert res["n_questions"] == len(groups)


def test_hand_worked_example():
    # q1: scores .3 (wrong), .1 (right) -> picks the right one; q2: .2 (right), .2 (wrong)
    # tie -> the first (right). Selected accuracy 2/2; random (1/2 + 1/2)/2 = 1/2.
    res = best_of_k(["q1", "q1", "q2", "q2"], {"u": np.array([0.3, 0.1, 0.2, 0.2])},
                    np.array([False, True, True, False]))
    assert res["selected"]["u"] == 1.0 and res["random"] == 0.5 and res["oracle"] == 1.0


def test_errors():
    with pytest.raises(ValueError, match="row 1: score nan"):
        select_best(["a", "b"], np.array([0.1, np.nan]))
    with pytest.raises(ValueError, match="shape"):
        select_best(["a"], np.array([0.1, 0.2]))


def test_cli_select(tmp_path, capsys):
    from fastuq.synth import corpus, write

    path = tmp_path / "c.parquet"
    write(corpus(400, protocol="debate", seed=1, questions_per_id=4), path)
    assert main(["select", str(path), "--method", "sauce,mean_agreement",
                 "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "100 questions, 400 trajectories" in out and "sauce" in out
