"""``fastuq report`` and :mod:`fastuq.report`: the page's numbers are ``fastuq eval``'s, the page
is self-contained, and a real headless browser renders it (a screenshot that is not blank and
shows the embedded plots).

The browser test needs Chromium (Debian: ``apt-get install chromium``). ``.ci/run`` installs
it when missing and sets ``FASTUQ_REQUIRE_BROWSER=1``, under which a missing browser fails
the test; elsewhere (a laptop or a GPU machine without Chromium, the README's test command)
the test is skipped with the reason, so the suite passes on every machine.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fastuq
from fastuq import evaluation as ev
from fastuq.cli import main, sample_corpus_path
from fastuq.engine.registry import score_outputs
from fastuq.report import build_report, render_html, write_report

DATA = Path(__file__).parent / "data"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
#: The page header's background (#243447), from the inline style sheet.
HEADER = np.array([36, 52, 71])


class _Page(HTMLParser):
    """What the tests read from a page: tags, image sources, table cells, the JSON block."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.images: list[str] = []
        self.tables: list[list[list[str]]] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._script: list[str] | None = None
        self.data_json: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "img":
            self.images.append(a.get("src") or "")
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "script" and a.get("id") == "fastuq-report-data":
            self._script = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables[-1].append(self._row)
            self._row = None
        elif tag == "script" and self._script is not None:
            self.data_json = "".join(self._script)
            self._script = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._script is not None:
            self._script.append(data)


def _parse(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    page.close()
    return page


@pytest.fixture(scope="module")
def sample_page(tmp_path_factory):
    """``fastuq report`` and ``fastuq eval --by protocol --json`` of the bundled sample."""
    tmp = tmp_path_factory.mktemp("report")
    out, ref = tmp / "report.html", tmp / "eval.json"
    assert main(["report", "-o", str(out)]) == 0
    assert main(["eval", "--method", "all", "--by", "protocol", "--json", str(ref)]) == 0
    return out, json.loads(ref.read_text()), out.read_text(encoding="utf-8")


def test_numbers_are_those_of_fastuq_eval(sample_page):
    _, ref, text = sample_page
    page = _parse(text)
    data = json.loads(page.data_json)
    assert data["n"] == ref["n"] == 2000
    assert data["accuracy"] == ref["accuracy"]
    assert data["methods"] == ref["methods"]
    # every estimator, pooled and per protocol, every metric, to the last bit
    assert data["estimators"] == ref["estimators"]
    assert data["by_protocol"] == ref["by_protocol"]
    assert set(data["by_protocol"]) == {"debate", "dylan"}
    assert {"bccs", "sauce_belief", "mean_token_entropy"} <= set(data["left_out"])


def test_tables_show_what_fastuq_eval_prints(sample_page):
    """The HTML tables hold the cells ``fastuq eval`` prints (pooled, then each protocol)."""
    _, _, text = sample_page
    page = _parse(text)
    scored = pq.read_table(sample_corpus_path())
    metric_tables = [t for t in page.tables if t and t[0][:2] == ["estimator", "AUROC"]]
    assert len(metric_tables) == 3
    scores = pl.from_arrow(fastuq.score(sample_corpus_path(), "all"))
    names = score_outputs(scores.columns)  # the estimators' score columns, _mean ones too
    labels = scored["correct"].to_numpy()
    protocols = scored["protocol"].to_numpy(zero_copy_only=False)
    expected = [ev.evaluation_table(labels, scores.select(names))]
    for proto in ("debate", "dylan"):
        keep = protocols == proto
        expected.append(ev.evaluation_table(labels[keep],
                                            scores.select(names).filter(pl.Series(keep))))
    for shown, table in zip(metric_tables, expected, strict=True):
        printed = ev.format_table(table).splitlines()
        assert [r.split() for r in printed[2:]] == shown[1:]
    summary = next(t for t in page.tables if t and t[0][0] == "protocol")
    assert summary[1:] == [
        ["debate", "1,000", "1,000", "68.10", "3.00", "3", "3.00"],
        ["dylan", "1,000", "1,000", "68.60", "1.72", "3", "4.00"],
        ["all", "2,000", "2,000", "68.35", "2.36", "3", "3.50"],
    ]


def test_page_is_self_contained(sample_page):
    _, _, text = sample_page
    page = _parse(text)
    data = json.loads(page.data_json)
    # risk-coverage + one reliability diagram per estimator, pooled and per protocol
    n_methods = len(data["methods"])
    assert {g: len(k) for g, k in data["figures"].items()} == {
        "all": 1 + n_methods, "debate": 1 + n_methods, "dylan": 1 + n_methods}
    assert len(page.images) == 3 * (1 + n_methods)
    for src in page.images:
        assert src.startswith("data:image/png;base64,")
        png = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    for tag, attrs in page.tags:
        assert tag not in ("link", "iframe", "object", "embed"), tag
        assert not (tag == "script" and attrs.get("src")), attrs
        for key in ("src", "href"):
            value = attrs.get(key)
            assert value is None or value.startswith("data:"), (tag, value)
    assert "http://" not in text and "https://" not in text and "url(" not in text


def _browser() -> str | None:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


def _screenshot(browser: str, page: Path, shot: Path, profile: Path) -> np.ndarray:
    """Render ``page`` headless at 1280 x 2400 and return the screenshot as uint8 RGB."""
    from matplotlib.image import imread

    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}",
           "--window-size=1280,2400", f"--screenshot={shot}", page.resolve().as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and shot.exists(), (done.returncode, done.stderr[-2000:])
    img = imread(shot)  # float RGB(A) in [0, 1]
    return (np.asarray(img)[..., :3] * 255).round().astype(np.int64)


def _plot_blue(rgb: np.ndarray) -> int:
    """Pixels of matplotlib's blues (C0 and the reliability bars, C0 at alpha .75): blue
    exceeding red by more than 80. No colour of the page's own style sheet does, so they
    show that the embedded PNGs were decoded and drawn."""
    return int((rgb[..., 2] - rgb[..., 0] > 80).sum())


def test_renders_in_headless_chromium(sample_page, tmp_path):
    browser = _browser()
    if browser is None:
        if os.environ.get("FASTUQ_REQUIRE_BROWSER") == "1":
            pytest.fail("no Chromium to render the report, and FASTUQ_REQUIRE_BROWSER=1 (set "
                        "by .ci/run) requires it: apt-get install -y chromium")
        pytest.skip("no Chromium to render the report (Debian: apt-get install -y chromium; "
                    ".ci/run installs it and requires this test)")
    out, _, _ = sample_page
    rgb = _screenshot(browser, out, tmp_path / "shot.png", tmp_path / "profile")
    assert rgb.shape[:2] == (2400, 1280)
    # not blank: many colours, real contrast, ink spread over the page
    colours = np.unique(rgb.reshape(-1, 3) @ np.array([1 << 16, 1 << 8, 1]))
    assert colours.size > 200, colours.size
    assert rgb.std() > 20
    ink = (rgb.sum(axis=2) < 600).reshape(24, 100, 16, 80).any(axis=(1, 3))
    assert ink.mean() > 0.5, ink.astype(int)  # most 100 x 80 pixel tiles hold something dark
    # the style sheet applied (the header band) and the embedded plots decoded (C0 blue)
    assert (np.abs(rgb[2:14] - HEADER).max(axis=2) <= 2).mean() > 0.98  # its top padding
    assert _plot_blue(rgb) > 20_000


def test_broken_page_is_told_apart(tmp_path):
    """The screenshot checks fail for a page whose images do not decode (same layout)."""
    browser = _browser()
    if browser is None:
        pytest.skip("needs Chromium (the rendering test above fails loudly without it)")
    report = build_report(sample_corpus_path(), methods=["sauce"], plots=True)
    text = render_html(report).replace("data:image/png;base64,", "data:image/png;base64,AAAA")
    page = tmp_path / "broken.html"
    page.write_text(text, encoding="utf-8")
    rgb = _screenshot(browser, page, tmp_path / "shot.png", tmp_path / "profile")
    assert _plot_blue(rgb) == 0


def test_sweep_section(tmp_path):
    from fastuq.sweeps import sweep

    grid = {"lam": [0.6, 0.8, 0.95], "q": [1e-3, 0.1, 1.0]}
    report = build_report(sample_corpus_path(), methods=["sauce", "mean_agreement"],
                          plots=False, sweep_grid=grid, sweep_log=["q"], sweep_folds=3)
    ref = sweep(sample_corpus_path(), grid, ("auroc", "auarc", "prr"), folds=3)
    sw = report.sweep
    assert sw is not None and sw.table.equals(ref)
    best = ref.sort("auroc", descending=True, maintain_order=True).row(0, named=True)
    assert sw.best == best
    assert sw.preset == ref.preset
    assert sw.cv.mean_heldout == ref.cv.mean_heldout
    assert sw.figure.png[:8] == b"\x89PNG\r\n\x1a\n"
    page = _parse(report.html())
    data = json.loads(page.data_json)
    assert data["sweep"]["best"] == best and data["sweep"]["points"] == 9
    assert data["sweep"]["grid"] == grid
    assert len(page.images) == 1 and ("section", {"id": "sweep"}) in page.tags
    assert data["figures"] == {}


def test_cli_sweep_default_grid_and_errors(tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", "--method", "sauce", "--sweep", "--grid", "lam=0.7,0.9",
                 "--grid", "q=1e-3:1:3", "--log", "q", "-o", str(out)]) == 0
    data = json.loads(_parse(out.read_text()).data_json)
    assert data["sweep"]["grid"]["lam"] == [0.7, 0.9]
    assert data["sweep"]["grid"]["q"] == pytest.approx([1e-3, 10 ** -1.5, 1.0])
    capsys.readouterr()
    bad = tmp_path / "bad.html"
    for argv, message in [
        (["--grid", "lam"], "NAME=SPEC"),
        (["--grid", "beta=1:2:3"], "unknown SAUCE parameter"),
        (["--grid", "lam=0.5", "--grid", "lam=0.6"], "given twice"),
        (["--log", "q"], "needs --sweep"),
        (["--grid", "lam=0.5:1:3", "--log", "q"], "not swept"),
        (["--param", "no_such_param=1"], "no_such_param"),
        (["--method", "nonesuch"], "nonesuch"),
    ]:
        assert main(["report", *argv, "-o", str(bad)]) == 2, argv
        assert message in capsys.readouterr().err, argv
        assert not bad.exists()
    assert main(["report", "-o", str(tmp_path / "r.png")]) == 2
    assert "name it r.html" in capsys.readouterr().err
    assert main(["report", str(sample_corpus_path()), "-o", str(sample_corpus_path())]) == 2


def test_unlabelled_corpus_fails_and_writes_nothing(tmp_path, capsys):
    table = pq.read_table(sample_corpus_path()).drop_columns(["correct"])
    corpus = tmp_path / "unlabelled.parquet"
    pq.write_table(table, corpus)
    out = tmp_path / "r.html"
    assert main(["report", str(corpus), "-o", str(out)]) == 2
    assert "no labels" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unlabelled.parquet"]
    with_null = pq.read_table(sample_corpus_path())
    col = with_null.column("correct").to_pylist()
    col[7] = None
    pq.write_table(with_null.set_column(with_null.schema.get_field_index("correct"), "correct",
                                        pa.array(col)), corpus)
    assert main(["report", str(corpus), "-o", str(out)]) == 2
    assert "has no label" in capsys.readouterr().err and not out.exists()


def test_failed_render_leaves_no_file(tmp_path, monkeypatch):
    import fastuq.evaluation.report as rep

    def boom(report):
        raise RuntimeError("render failed")

    monkeypatch.setattr(rep, "render_html", boom)
    out = tmp_path / "r.html"
    with pytest.raises(RuntimeError, match="render failed"):
        write_report(sample_corpus_path(), out, methods=["sauce"], plots=False)
    assert list(tmp_path.iterdir()) == []


def test_unknown_arguments_raise(tmp_path):
    with pytest.raises(TypeError):
        build_report(sample_corpus_path(), nonsense=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="no_such"):
        build_report(sample_corpus_path(), params={"no_such": 1.0}, plots=False)
    with pytest.raises(ValueError, match="sweep metric"):
        build_report(sample_corpus_path(), methods=["sauce"], plots=False,
                     sweep_grid={"lam": [0.9]}, sweep_metric="ece")
    with pytest.raises(ValueError, match="name="):
        build_report(pq.read_table(sample_corpus_path()), plots=False)


def test_dylan_logs_one_protocol(tmp_path):
    """Real DyLAN logs (the test slices): one protocol, no token entropy (observation noise),
    no per-protocol section, numbers equal to ``fastuq eval``'s."""
    from fastuq.importers import import_dylan

    corpus = tmp_path / "dylan.parquet"
    pq.write_table(import_dylan(DATA / "dylan_math"), corpus)
    out, ref = tmp_path / "dylan.html", tmp_path / "eval.json"
    assert main(["report", str(corpus), "--observation-noise", "0.1", "-o", str(out)]) == 0
    assert main(["eval", str(corpus), "--method", "all", "--observation-noise", "0.1",
                 "--json", str(ref)]) == 0
    page = _parse(out.read_text())
    data, expected = json.loads(page.data_json), json.loads(ref.read_text())
    assert data["estimators"] == expected["estimators"] and data["n"] == 44
    assert list(data["by_protocol"]) == ["dylan"]
    assert data["by_protocol"]["dylan"] == expected["estimators"]
    assert list(data["figures"]) == ["all"]
    assert data["summary"][-1]["agents_mean"] == 4.0
    assert "sauce" in data["methods"] and "umas" in data["left_out"]


def test_corpus_without_protocol_or_question_ids(tmp_path):
    """A corpus without ``protocol`` and ``question_id`` columns: pooled only, nulls where the
    summary cannot say; the numbers are still ``evaluation_table``'s."""
    table = pq.read_table(sample_corpus_path()).drop_columns(["protocol", "question_id"])
    corpus = tmp_path / "bare.parquet"
    pq.write_table(table, corpus)
    report = write_report(corpus, tmp_path / "bare.html",
                          methods=["mean_agreement", "last_agreement"])
    labels = table["correct"].to_numpy()
    scores = pl.from_arrow(fastuq.score(corpus, ["mean_agreement", "last_agreement"]))
    assert report.pooled.equals(ev.evaluation_table(
        labels, scores.select("mean_agreement", "last_agreement")))
    assert report.by_protocol == {} and list(report.figures) == ["all"]
    assert report.summary.to_dicts()[-1] == {
        "protocol": "all", "trajectories": 2000, "questions": None,
        "accuracy": labels.mean(), "rounds_mean": 2.359, "rounds_max": 3,
        "agents_mean": 3.5}
    page = _parse((tmp_path / "bare.html").read_text())
    assert json.loads(page.data_json)["by_protocol"] is None
    assert "The corpus has no protocol column." in (tmp_path / "bare.html").read_text()
