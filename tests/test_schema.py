"""fastuq.io.schema: canonical types, conform, and validation errors that name row/id/field."""

import polars as pl
import pyarrow as pa
import pytest

from fastuq import synth
from fastuq.io.schema import CANONICAL, NODE_COLUMNS, ROUND_COLUMNS, conform, validate

DESIGN_TYPES = {
    "trajectory_id": pa.string(),
    "question_id": pa.string(),
    "protocol": pa.string(),
    "source": pa.string(),  # the log format or data set (metadata only)
    "n_agents": pa.int32(),
    "reference": pa.string(),
    "final_answer": pa.string(),
    "correct": pa.bool_(),
    "agreement": pa.list_(pa.float64()),
    "token_entropy": pa.list_(pa.float64()),
    "answers": pa.list_(pa.list_(pa.string())),
    "seq_logprob": pa.list_(pa.list_(pa.float64())),
    "n_tokens": pa.list_(pa.list_(pa.int32())),
    "token_logprobs": pa.list_(pa.list_(pa.list_(pa.float32()))),
    "topk_logprobs": pa.list_(pa.list_(pa.list_(pa.list_(pa.float32())))),
    "belief": pa.list_(pa.list_(pa.float64())),
    # DESIGN.md's UAAD step signals, [round][agent][step]
    "step_h": pa.list_(pa.list_(pa.list_(pa.float64()))),
    "step_q": pa.list_(pa.list_(pa.list_(pa.float64()))),
    "step_d": pa.list_(pa.list_(pa.list_(pa.float64()))),
    # not in DESIGN.md: the log-probability of each node's answer tokens (BCCS's belief)
    "answer_logprob": pa.list_(pa.list_(pa.float64())),
    "predecessors": pa.list_(pa.list_(pa.list_(pa.int32()))),
    # DESIGN.md: [round][agent] the agent is still in the team (DyLAN's ranker survivors)
    "active": pa.list_(pa.list_(pa.bool_())),
    "flags": pa.list_(pa.string()),
    "texts": pa.list_(pa.list_(pa.string())),
}


def _table(**cols):
    base = {"trajectory_id": ["t0", "t1", "t2"], "n_agents": [3, 3, 4]}
    base.update(cols)
    return pa.table(base)


def test_canonical_schema_has_every_design_column_with_its_type():
    assert set(CANONICAL.names) == set(DESIGN_TYPES)
    for name, t in DESIGN_TYPES.items():
        assert CANONICAL.field(name).type == t, name
    assert set(NODE_COLUMNS) | set(ROUND_COLUMNS) < set(CANONICAL.names)


def test_conform_casts_compatible_types_and_keeps_extra_columns():
    t = synth.corpus(50, protocol="mixed", topk=2, seed=1)
    wide = pl.from_arrow(t).to_arrow()  # large_string / large_list everywhere
    wide = wide.append_column("extra", pa.array([{"a": 1}] * 50))
    wide = wide.set_column(wide.column_names.index("n_agents"), "n_agents",
                           wide["n_agents"].cast(pa.int64()))
    wide = wide.set_column(wide.column_names.index("agreement"), "agreement",
                           wide["agreement"].cast(pa.large_list(pa.float32())))
    out = conform(wide)
    assert out.column_names == wide.column_names
    for f in out.schema:
        if f.name in DESIGN_TYPES:
            assert f.type == DESIGN_TYPES[f.name], f.name
    assert out["extra"].equals(wide["extra"])
    assert out["answers"].to_pylist() == t["answers"].to_pylist()
    assert out["agreement"].to_pylist() == [
        [float(pa.scalar(v, pa.float32()).as_py()) for v in row]
        for row in t["agreement"].to_pylist()]


def test_conform_leaves_canonical_columns_uncopied():
    t = synth.corpus(20, seed=2)
    out = conform(t)
    assert out.schema.equals(t.schema)
    before, after = t["answers"].chunk(0), out["answers"].chunk(0)
    assert after.buffers()[1].address == before.buffers()[1].address


def test_conform_integer_answers_become_strings_and_null_columns_typed():
    t = _table(answers=[[[1, 2]], [[3, None]], None], reference=[None, None, None])
    out = conform(t)
    assert out["answers"].to_pylist() == [[["1", "2"]], [["3", None]], None]
    assert out.schema.field("reference").type == pa.string()


def test_conform_uncastable_value_names_row_trajectory_and_field():
    t = _table(agreement=[["0.5"], ["0.5", "oops"], ["1"]])
    with pytest.raises(ValueError, match=r"f\.jsonl: row 11 \(trajectory_id 't1'\): field "
                                         r"agreement: cannot cast"):
        conform(t, source="f.jsonl", row0=10)


def test_validate_accepts_simulated_corpora():
    for protocol in ("debate", "dylan", "mixed"):
        validate(synth.corpus(300, protocol=protocol, topk=2, seed=3), source="sim")


def test_validate_missing_trajectory_id():
    with pytest.raises(ValueError, match=r"f\.parquet: row 5: field trajectory_id: missing"):
        validate(pa.table({"x": [1]}), source="f.parquet", row0=5)


def test_validate_null_trajectory_id():
    t = pa.table({"trajectory_id": ["a", None, "c"]})
    with pytest.raises(ValueError, match=r"f\.parquet: row 8: field trajectory_id: null id"):
        validate(t, source="f.parquet", row0=7)


def test_validate_duplicate_trajectory_id():
    t = pa.table({"trajectory_id": ["a", "b", "c", "b"]})
    with pytest.raises(ValueError, match=r"src: row 3 \(trajectory_id 'b'\): field "
                                         r"trajectory_id: duplicate id \(first at row 1\)"):
        validate(t, source="src")


def test_validate_wrong_type_that_cannot_be_cast():
    t = _table(correct=[{"a": 1}, {"a": 2}, {"a": 3}])
    with pytest.raises(ValueError, match=r"src: row 0 \(trajectory_id 't0'\): field correct: "
                                         r"cannot cast struct"):
        validate(t, source="src")


def test_validate_nonpositive_n_agents():
    t = pa.table({"trajectory_id": ["a", "b"], "n_agents": [2, 0]})
    with pytest.raises(ValueError, match=r"row 1 \(trajectory_id 'b'\): field n_agents: must "
                                         r"be positive"):
        validate(t)


def test_validate_agent_list_longer_than_n_agents():
    t = _table(answers=[[["1", "1", "1"]], [["1"], ["1", "2", "3", "4"]], [["1"]]])
    with pytest.raises(ValueError, match=r"src: row 101 \(trajectory_id 't1'\): field answers: "
                                         r"round 1 has 4 agent slots, more than n_agents = 3"):
        validate(t, source="src", row0=100)


def test_validate_node_columns_disagree_on_round_count():
    t = _table(answers=[[["1"]], [["1"], ["2"]], [["1"]]],
               seq_logprob=[[[-1.0]], [[-1.0]], [[-2.0]]])
    with pytest.raises(ValueError, match=r"src: row 1 \(trajectory_id 't1'\): field "
                                         r"seq_logprob: 1 rounds, but answers has 2"):
        validate(t, source="src")


def test_validate_node_columns_disagree_on_slot_count_in_a_round():
    t = _table(answers=[[["1"]], [["1"], ["2", None]], [["1"]]],
               n_tokens=[[[3]], [[3], [4]], [[5]]])
    with pytest.raises(ValueError, match=r"row 1 \(trajectory_id 't1'\): field n_tokens: "
                                         r"round 1 has 1 agent slots, but answers has 2"):
        validate(t, source="src")


def test_validate_active_is_a_node_column_of_booleans():
    answers = [[["1", "2", "3"]], [["1", "1", "2"], ["1", "1", None]], [["4"] * 4]]
    ok = [[[True, True, True]], [[True, True, True], [True, True, False]], [[True] * 4]]
    validate(_table(answers=answers, active=ok), source="src")
    # 0/1 integers are booleans; a null list or node means active
    validate(_table(answers=answers, active=[[[1, 1, 1]], None, [[1, 0, None, 1]]]))
    cases = [
        # a value a cast would coerce: 2 would become true
        ([[[1, 1, 1]], [[1, 1, 1], [1, 2, 0]], [[1] * 4]],
         r"row 1 \(trajectory_id 't1'\): field active: round 1, agent 1: must be true/false "
         r"\(or 0/1\), got 2"),
        ([[["yes", "yes", "no"]], [["yes"] * 3, ["yes"] * 3], [["yes"] * 4]],
         r"row 0 \(trajectory_id 't0'\): field active: must be \[round\]\[agent\] booleans"),
        # shaped unlike the other node columns
        ([[[True] * 3], [[True] * 3], [[True] * 4]],
         r"row 1 \(trajectory_id 't1'\): field active: 1 rounds, but answers has 2"),
        ([[[True] * 3], [[True] * 3, [True, True]], [[True] * 4]],
         r"row 1 \(trajectory_id 't1'\): field active: round 1 has 2 agent slots, but "
         r"answers has 3"),
        ([[[True] * 4], [[True] * 3, [True] * 3], [[True] * 4]],
         r"row 0 \(trajectory_id 't0'\): field active: round 0 has 4 agent slots, more than "
         r"n_agents = 3"),
    ]
    for active, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            validate(_table(answers=answers, active=active), source="src")


def test_validate_node_slot_mismatch_found_past_null_records():
    t = _table(answers=[None, [["1", "2"]], [["1"], ["2"]]],
               n_tokens=[[[3]], [[3, 3]], [[5], [5, 6]]])
    with pytest.raises(ValueError, match=r"row 2 \(trajectory_id 't2'\): field n_tokens: "
                                         r"round 1 has 2 agent slots"):
        validate(t)


def test_validate_agreement_length_differs_from_round_count():
    t = _table(answers=[[["1"]], [["1"], ["2"]], [["1"]]],
               agreement=[[1.0], [1.0], [1.0]])
    with pytest.raises(ValueError, match=r"row 1 \(trajectory_id 't1'\): field agreement: "
                                         r"1 values, but answers has 2 rounds"):
        validate(t, source="src")


def test_validate_token_entropy_length_differs_from_agreement():
    t = _table(agreement=[[1.0], [1.0, 0.5], [1.0]], token_entropy=[[0.1], [0.1], [0.2]])
    with pytest.raises(ValueError, match=r"row 1 \(trajectory_id 't1'\): field token_entropy: "
                                         r"1 values, but agreement has 2"):
        validate(t, source="src")


def test_validate_allows_nulls_pruned_rounds_and_missing_optional_columns():
    t = _table(answers=[[["1", None, None]], None, [["1", "2", "3", "4"], ["1", None]]],
               seq_logprob=[[[-1.0, None, None]], [[-2.0]], [[-1.0] * 4, [-1.0, None]]],
               agreement=[[1 / 3], None, [0.25, 0.25]])
    validate(t, source="src")
    validate(pa.table({"trajectory_id": pa.array([], pa.string())}))
