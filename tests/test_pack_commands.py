"""A pack (``fastuq pack``) in the commands beyond score/eval/select: ``gate`` (the plain
gate, ``gate calibrate`` and ``gate apply``) and ``report`` give the same bits from a pack
as from its Parquet source, through the CLI."""

from __future__ import annotations

import json
import re

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
