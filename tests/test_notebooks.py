"""The example notebooks (``notebooks/``): git holds them without outputs, exactly as
``notebooks/_build.py`` writes them from its cells, and each one runs from top to bottom without
an error in a fresh kernel of this interpreter and draws the figures it promises.

Notebooks 01 and 03 read the DyLAN logs in ``../shared/data/dylan_math`` beside the repository
(a CI clone has that folder beside it too): a missing folder fails the test, as it would fail
a reader.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import nbformat  # the test extra installs it (and nbclient, ipykernel)
import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"


def _build_module():
    """``notebooks/_build.py`` (not a package module: loaded from its file)."""
    spec = importlib.util.spec_from_file_location("fastuq_notebooks_build",
                                                  NOTEBOOKS / "_build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _build_module()
NAMES = list(build.NOTEBOOKS)


def test_every_notebook_is_listed():
    on_disk = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    assert on_disk == sorted(NAMES) == ["01_rescoring.ipynb", "02_sweep_fit.ipynb",
                                        "03_replay.ipynb", "04_self_consistency.ipynb",
                                        "05_openai_logprobs.ipynb"]


@pytest.mark.parametrize("name", NAMES)
def test_committed_without_outputs_and_as_built(name):
    path = NOTEBOOKS / name
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.id
    assert build.differences(path) == [], "run python notebooks/_build.py"
    assert build.main(["--check", name]) == 0


def test_check_finds_a_stale_or_executed_notebook(tmp_path, monkeypatch, capsys):
    name = NAMES[0]
    nb = build.build(name)
    nb.cells[1].source += "\nprint('edited')"
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text="hi\n")]
    (tmp_path / name).write_text(build.text(nb))
    assert build.differences(tmp_path / name) == [
        f"{name}: cell 1: source differs", f"{name}: cell 2: holds outputs (git keeps "
        "notebooks without them)"]
    monkeypatch.setattr(build, "HERE", tmp_path)
    assert build.main(["--check", name]) == 1
    assert "cell 1: source differs" in capsys.readouterr().err


def _images(cell) -> int:
    return sum("image/png" in out.get("data", {}) for out in cell.outputs)


@pytest.mark.slow  # a fresh Jupyter kernel per notebook, end to end
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_and_draws_its_figures(name, tmp_path):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    promised = {c.metadata["fastuq_figure"]: c.id for c in nb.cells
                if "fastuq_figure" in c.metadata}
    assert promised  # every notebook draws something
    build.execute(nb, tmp_path, repo=REPO, timeout=300)  # a cell that raises fails here
    cells = {c.id: c for c in nb.cells}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        assert cell.execution_count is not None, cell.id
        assert not [o for o in cell.outputs if o.output_type == "error"], cell.id
        stderr = "".join(o.get("text", "") for o in cell.outputs
                         if o.output_type == "stream" and o.get("name") == "stderr")
        assert "Traceback" not in stderr and "Warning" not in stderr, (cell.id, stderr)
    for figure, cell_id in promised.items():
        assert _images(cells[cell_id]) == 1, f"{name}: figure {figure!r} not drawn"
    # no figure elsewhere goes unchecked (a stray plot is one the notebook does not describe)
    assert sum(_images(c) for c in nb.cells if c.cell_type == "code") == len(promised)
