"""Rebuild and execute the example notebooks (needs nbformat, nbclient, ipykernel,
matplotlib: ``pip install nbformat nbclient ipykernel matplotlib``). Run from the repository
root: ``python notebooks/_build.py``."""
import pathlib
import tempfile

import nbformat as nbf
from nbclient import NotebookClient

nb = nbf.v4.new_notebook()
cells = [
    nbf.v4.new_markdown_cell("""# Rescoring a corpus with fastuq

A simulated corpus of 20,000 debate and DyLAN trajectories (`fastuq.synth`) is scored by every
estimator whose inputs it has, evaluated against its labels, and compared on a risk-coverage
plot. The same calls work on any corpus file (Parquet, JSONL, JSONL.gz)."""),
    nbf.v4.new_code_cell("""import time
import numpy as np
import matplotlib.pyplot as plt
import fastuq
from fastuq.synth import corpus, write

write(corpus(20_000, protocol="mixed", seed=7), "corpus.parquet")
start = time.perf_counter()
scores = fastuq.score("corpus.parquet", "all")
n_est = sum(c in fastuq.ESTIMATORS for c in scores.column_names)
print(f"scored {scores.num_rows:,} trajectories x {n_est} estimators "
      f"in {time.perf_counter() - start:.2f} s (first call includes compilation)")
scores.column_names"""),
    nbf.v4.new_markdown_cell("Exact AUROC, AUARC, PRR, Brier after out-of-fold Platt scaling, and ECE, for all columns at once:"),
    nbf.v4.new_code_cell("""import polars as pl
import pyarrow.parquet as pq
names = [c for c in scores.column_names if c in fastuq.ESTIMATORS]
labels = scores["correct"].to_numpy()
table = fastuq.metrics.evaluate(labels, {n: scores[n].to_numpy() for n in names})
pl.DataFrame(table).sort("auroc", descending=True)"""),
    nbf.v4.new_markdown_cell("""SAUCE's two presets (debate: lam .95, DyLAN: lam .70) put the two protocols' scores on
different scales, so pooled metrics of a mixed corpus understate it. Per protocol:"""),
    nbf.v4.new_code_cell("""protocols = scores["protocol"].to_numpy()
rows = []
for proto in ("debate", "dylan"):
    keep = protocols == proto
    res = fastuq.metrics.evaluate(labels[keep], {n: scores[n].to_numpy()[keep] for n in names},
                                  metrics=("auroc", "auarc"))
    rows.append(pl.DataFrame(res).with_columns(pl.lit(proto).alias("protocol")))
pl.concat(rows).select("protocol", "name", "auroc", "auarc").sort(["protocol", "auroc"], descending=[False, True])"""),
    nbf.v4.new_markdown_cell("""The simulator's signals are a toy with noise chosen by hand: which estimator wins on it
says nothing about real rollouts (the SAUCE and UMAS papers report their own comparisons on
real data). It is here to show the calls and to exercise the engine at scale.

Risk-coverage: accuracy of the most certain fraction of trajectories (ties keep file order, as
AUARC):"""),
    nbf.v4.new_code_cell("""fig, ax = plt.subplots(figsize=(6, 4))
n = len(labels)
coverage = np.arange(1, n + 1) / n
for name in ("sauce", "mean_agreement", "umas", "msp_final"):
    order = np.argsort(scores[name].to_numpy(), kind="stable")
    ax.plot(coverage, np.cumsum(labels[order]) / np.arange(1, n + 1), label=name)
ax.axhline(labels.mean(), color="grey", lw=0.8, ls="--", label="no rejection")
ax.set_xlabel("coverage"); ax.set_ylabel("accuracy of retained"); ax.legend(); ax.grid(alpha=.3)
plt.show()"""),
    nbf.v4.new_markdown_cell("The same SAUCE scores from the per-trajectory API of the original package, for a few records:"),
    nbf.v4.new_code_cell("""records = pq.read_table("corpus.parquet").slice(0, 5).to_pylist()
for r, s in zip(records, scores["sauce"].to_numpy()[:5]):
    one = fastuq.sauce_score(r["agreement"], r["token_entropy"], r["protocol"])
    print(f"{r['trajectory_id']}  batch {s:+.12f}  scalar {one:+.12f}")"""),
]
nb.cells = cells
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": tempfile.mkdtemp()}}).execute()
nbf.write(nb, str(pathlib.Path(__file__).parent / "01_rescoring.ipynb"))
print("ok")
