"""A pack (``fastuq pack``) in the commands beyond score/eval/select: ``gate`` (the plain
gate, ``gate calibrate`` and ``gate apply``) and ``report`` give the same bits from a pack
as from its Parquet source, through the CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from fastuq.cli import main, sample_corpus_path
from fastuq.engine.packed import pack_corpus


def _cli(*argv) -> int:
    return main([str(a) for a in argv])


@pytest.fixture(scope="module")
def sample_pack(tmp_path_factory):
    """The bundled sample packed in chunks of 700 (3 chunks, teams cut at chunk edges)."""
    pack = tmp_path_factory.mktemp("pack") / "s.fqpack"
    pack_corpus(sample_corpus_path(), pack, chunk_rows=700)
    return pack


def _same_table(a, b) -> None:
    ta, tb = pq.read_table(a), pq.read_table(b)
    assert ta.num_rows > 0 and ta.schema == tb.schema
    for name in ta.column_names:
        x, y = ta[name].combine_chunks(), tb[name].combine_chunks()
        if x.type.equals(tb.schema.field(name).type) and str(x.type) == "double":
            assert np.array_equal(x.to_numpy().view(np.uint64), y.to_numpy().view(np.uint64)), name
        else:
            assert x.equals(y), name


@pytest.mark.slow  # eight commands on the sample (about 15 s on 2 cores)
def test_gate_calibrate_and_apply_from_pack_equal_parquet(tmp_path, sample_pack, capsys):
    src = sample_corpus_path()
    runs = {}
    for label, corpus in (("parquet", src), ("pack", sample_pack)):
        d = tmp_path / label
        d.mkdir()
        # the source read in the pack's chunks; the pack in its own
        chunks = ("--chunk-rows", 700) if label == "parquet" else ()
        assert _cli("gate", "calibrate", corpus, "--score", "sauce", "--by", "protocol",
                    "-o", d / "gate.json", *chunks) == 0
        assert _cli("gate", "apply", d / "gate.json", corpus, "-o", d / "verdicts.parquet",
                    "--json", d / "applied.json", *chunks) == 0
        # the plain gate on a scores file joined to the corpus's labels
        assert _cli("score", src, "-o", d / "scores.parquet", "--method", "sauce,umas") == 0
        assert _cli("gate", corpus, "--scores", d / "scores.parquet", "--score", "umas",
                    "-o", d / "plain.parquet", "--json", d / "plain.json", *chunks) == 0
        runs[label] = d
    capsys.readouterr()
    a, b = runs["parquet"], runs["pack"]
    gate_a = json.loads((a / "gate.json").read_text())
    gate_b = json.loads((b / "gate.json").read_text())
    assert gate_a["by"] == "protocol" and len(gate_a["gates"]) == 2
    assert gate_a == gate_b  # thresholds, counts and bounds: the same floats
    for name in ("applied.json", "plain.json"):
        assert json.loads((a / name).read_text()) == json.loads((b / name).read_text()), name
    _same_table(a / "verdicts.parquet", b / "verdicts.parquet")
    _same_table(a / "plain.parquet", b / "plain.parquet")


def _report_without_provenance(page: str, corpus: str) -> str:
    """The page with the two things that name the run, not its numbers, blanked: the
    corpus's path and the creation time."""
    page = page.replace(corpus, "CORPUS")
    return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", "TIME", page)


@pytest.mark.slow  # two report pages (about 15 s on 2 cores)
def test_report_from_pack_equals_parquet(tmp_path, sample_pack, capsys):
    src = sample_corpus_path()
    pages = {}
    for label, corpus in (("parquet", src), ("pack", sample_pack)):
        out = tmp_path / f"{label}.html"
        chunks = ("--chunk-rows", 700) if label == "parquet" else ()
        assert _cli("report", corpus, "-o", out, "--name", "sample",
                    "--method", "sauce,umas,mean_agreement,cocoa", *chunks) == 0
        pages[label] = _report_without_provenance(out.read_text(), str(corpus))
    capsys.readouterr()
    data = {k: json.loads(re.search(r'id="fastuq-report-data">(.*?)</script>', v, re.S)[1])
            for k, v in pages.items()}
    assert data["parquet"]["n"] == 2000 and len(data["parquet"]["estimators"]) == 4
    assert data["parquet"] == data["pack"]  # every metric, pooled and per protocol
    assert pages["parquet"] == pages["pack"]  # and the page itself: tables and plots


# --- the source given too: a changed source refused on every command ---------------------


@pytest.fixture
def packed_copy(tmp_path):
    """A copy of the sample (a source that can change) and its pack."""
    src = tmp_path / "c.parquet"
    src.write_bytes(sample_corpus_path().read_bytes())
    pack = tmp_path / "c.fqpack"
    pack_corpus(src, pack, chunk_rows=1000)
    return src, pack


#: A command line per command that reads a corpus, CORPUS where the pack goes.
COMMANDS = [
    ("score", "CORPUS", "-o", "OUT.parquet"),
    ("score", "--engine", "ray", "CORPUS", "-o", "OUTDIR"),
    ("eval", "CORPUS"),
    ("select", "CORPUS"),
    ("sweep", "CORPUS", "--lam", "0.5:1:2", "-o", "OUT.parquet"),
    ("fit", "CORPUS", "--steps", "2", "-o", "OUT.json"),
    ("gate", "calibrate", "CORPUS", "--score", "sauce", "-o", "OUT.json"),
    ("gate", "apply", "GATE.json", "CORPUS", "-o", "OUT.parquet"),
    ("calibrate", "CORPUS", "-o", "OUT.json"),
    ("replay", "CORPUS", "--policy", "fixed", "-o", "OUT.parquet"),
    ("report", "CORPUS", "-o", "OUT.html"),
]


def _argv(command, corpus, tmp_path):
    names = {"CORPUS": corpus, "GATE.json": tmp_path / "gate.json"}
    return [str(names.get(a, tmp_path / a if a.startswith("OUT") else a)) for a in command]


@pytest.mark.parametrize("change", ["size", "content"])
def test_changed_source_refuses_the_pack_on_every_command(tmp_path, packed_copy, capsys,
                                                          change):
    src, pack = packed_copy
    (tmp_path / "gate.json").write_text("{}")  # never read: the pack is refused first
    data = bytearray(src.read_bytes())
    if change == "size":
        data += b"\0"
        why = f"now {len(data)} bytes, packed from {len(data) - 1} bytes"
    else:  # the same size, one byte flipped
        data[len(data) // 2] ^= 0xFF
        why = "same size, another SHA-256"
    src.write_bytes(bytes(data))
    for command in COMMANDS:
        argv = _argv(command, pack, tmp_path)
        assert _cli(*argv, "--source", src) == 2, command
        err = capsys.readouterr().err
        assert f"pack refused: source file {src} changed since it was packed ({why})" in err
        assert "re-pack it: fastuq pack SOURCE -o" in err, command
    assert not any(p.name.startswith("OUT") for p in tmp_path.iterdir())


def test_unchanged_source_passes_and_source_needs_a_pack(tmp_path, packed_copy, capsys):
    src, pack = packed_copy
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert _cli("score", pack, "-o", a, "--source", src) == 0
    assert _cli("score", src, "-o", b, "--chunk-rows", 1000) == 0
    assert pq.read_table(a).equals(pq.read_table(b))
    assert _cli("eval", pack, "--source", src, "--method", "sauce") == 0
    assert "warning" not in capsys.readouterr().err
    # --source with a corpus that is not a pack: a usage error
    assert _cli("eval", src, "--source", src) == 2
    assert f"{src} is not a pack" in capsys.readouterr().err


def test_python_api_pack_with_source(tmp_path, packed_copy):
    import fastuq
    from fastuq.errors import PackError

    src, pack = packed_copy
    checked = fastuq.Pack(pack, source=src)
    assert checked.rows == 2000 and str(checked) == str(pack)
    by_path = fastuq.score(str(pack), "sauce,umas")
    assert fastuq.score(checked, "sauce,umas").equals(by_path)
    src.write_bytes(src.read_bytes()[:-1])
    with pytest.raises(PackError, match="changed since it was packed"):
        fastuq.Pack(pack, source=src)


def test_a_changed_source_warns_without_source(tmp_path, packed_copy, capsys):
    """Without --source: one stat per source file. A source file at its recorded path with
    another size, or the same size and another modification time, is said on stderr (once
    per run) and the pack is read; a source moved away says nothing."""
    import os
    import warnings

    import fastuq
    from fastuq.errors import PackWarning

    src, pack = packed_copy
    out = tmp_path / "x.parquet"
    st = src.stat()
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched: same bytes
    assert _cli("score", pack, "-o", out) == 0
    err = capsys.readouterr().err
    assert err.count("warning:") == 1
    assert f"source file {src.resolve()} was modified since it was packed (same size" in err
    # checked by content in this process: the same file, untouched since, says nothing
    fastuq.Pack(pack, source=src)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PackWarning)
        fastuq.score(pack, "sauce")
    src.write_bytes(src.read_bytes() + b"\0")
    with pytest.warns(PackWarning, match=r"changed since it was packed \(now \d+ bytes"):
        fastuq.score(pack, "sauce")
    src.rename(tmp_path / "moved.parquet")
    with warnings.catch_warnings():
        warnings.simplefilter("error", PackWarning)
        assert fastuq.score(pack, "sauce").num_rows == 2000


# --- one transfer per chunk to the devices ----------------------------------------------


def _with_bad_rows(path) -> list[int]:
    """The bundled sample with two records that ``fastuq pack`` takes and scoring refuses
    (written to ``path``): row 5 has no valid node (every ``seq_logprob`` null; found by the
    vectorized skip checks), row 900 names predecessor 7 in its team of three (found by
    UMAS's own check, which drops the row and scores the chunk again). Returns their rows."""
    import pyarrow as pa

    table = pq.read_table(sample_corpus_path())
    seq = table["seq_logprob"].to_pylist()
    seq[5] = [[None] * len(r) for r in seq[5]]
    field = table.schema.field("seq_logprob")
    table = table.set_column(table.column_names.index("seq_logprob"), field,
                             pa.array(seq, field.type))
    preds: list = [None] * table.num_rows
    preds[900] = [[None] * len(r) for r in seq[900]]
    preds[900][-1][0] = [7]
    field = pa.field("predecessors", pa.list_(pa.list_(pa.list_(pa.int32()))))
    pq.write_table(table.append_column(field, pa.array(preds, field.type)), path)
    return [5, 900]


@pytest.mark.parametrize("on_error, bad_rows", [("raise", False), ("skip", False),
                                                ("skip", True)])
def test_a_packs_chunk_goes_to_the_devices_in_one_transfer(tmp_path, monkeypatch, on_error,
                                                           bad_rows):
    """Scoring a pack with the JAX kernels hands each chunk's inputs (every estimator's,
    a shared mask once) to the devices in one ``jax.device_put``, and no kernel is given a
    host array (which JAX would transfer by itself): counted on whatever the default
    backend is (the CPU split into one device per core, or a GPU). So with ``on_error=
    "skip"`` too, and for chunks that lost rows to it (the arrays of the rows left in one
    put, after a kernel's own check dropped a row and the chunk was prepared again). The
    scores (and the skipped records) are those of the source."""
    import jax

    import fastuq.engine.runtime as runtime
    from fastuq.engine.pipeline import iter_scores

    src = sample_corpus_path()
    bad = []
    if bad_rows:
        src = tmp_path / "bad.parquet"
        bad = _with_bad_rows(src)
    pack = tmp_path / "s.fqpack"
    manifest = pack_corpus(src, pack, chunk_rows=700)
    n_chunks = len(manifest["chunks"])
    assert n_chunks == 3
    methods = "sauce,umas,msp_final,mean_agreement,cocoa"

    def run(source, **kw):
        skipped: list = []
        out: dict[str, list] = {}
        for batch, scores in iter_scores(str(source), methods=methods, dtype="float64",
                                         on_error=on_error,
                                         skipped=skipped if on_error == "skip" else None,
                                         **kw):
            for k, v in {"trajectory_id": batch.ids.to_pylist(), **scores}.items():
                out.setdefault(k, []).extend(list(v))
        return out, skipped

    want, want_skipped = run(src, chunk_rows=700)
    assert [s.row for s in want_skipped] == bad

    puts: list[int] = []  # host arrays moved by each device_put call
    implicit: list[str] = []  # host arrays handed to a kernel
    put, per_device = jax.device_put, runtime.per_device

    def counting_put(x, *args, **kwargs):
        leaves = jax.tree_util.tree_leaves(x)
        host = sum(isinstance(v, np.ndarray) and v.ndim > 0 for v in leaves)
        if host:
            puts.append(host)
        return put(x, *args, **kwargs)

    def counting_per_device(fn, axes, **kwargs):
        run = per_device(fn, axes, **kwargs)

        def call(*args):
            implicit.extend(kwargs.get("estimator", "?") for a in args
                            if isinstance(a, np.ndarray) and a.ndim > 0)
            return run(*args)

        return call

    monkeypatch.setattr(jax, "device_put", counting_put)
    monkeypatch.setattr(runtime, "per_device", counting_per_device)
    got, got_skipped = run(pack)
    assert implicit == []
    assert len(puts) == n_chunks, puts
    assert all(k >= 5 for k in puts)  # each chunk: every estimator's arrays in one call
    assert got_skipped == want_skipped
    assert got.keys() == want.keys() and len(got["trajectory_id"]) == 2000 - len(bad)
    assert got.pop("trajectory_id") == want.pop("trajectory_id")
    for name in want:
        x, y = np.asarray(got[name], np.float64), np.asarray(want[name], np.float64)
        assert np.array_equal(x.view(np.uint64), y.view(np.uint64)), name


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize("keep", [("protocol", "correct"),
                                  ("trajectory_id", "question_id", "protocol", "correct")])
def test_scored_table_from_a_pack_holds_no_mapped_chunk(sample_pack, keep):
    """The columns ``score_corpus`` keeps beside the scores (``fastuq eval``: protocol and
    correct) are copied out of the pack's memory-mapped chunk files: a slice of one would
    keep its whole mapping alive (at 1e7 trajectories, 3.8 GiB of mapped pages held until
    the metrics ran). Checked in the process's own memory map."""
    import gc

    from fastuq.cli.options import score_corpus

    table, _ = score_corpus(sample_pack, ["sauce"], keep=keep)
    gc.collect()
    mapped = [line for line in Path("/proc/self/maps").read_text().splitlines()
              if str(sample_pack) in line]
    assert table.num_rows == 2000 and set(keep) <= set(table.column_names)
    assert mapped == []
