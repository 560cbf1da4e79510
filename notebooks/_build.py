"""The example notebooks: their cells are written here; this script writes, executes and checks
them. Run from anywhere (paths are taken relative to this file)::

    python notebooks/_build.py            # write notebooks/NN_*.ipynb from the cells below,
                                          # without outputs (what git holds)
    python notebooks/_build.py --render   # execute each into notebooks/rendered/ (ignored by
                                          # git): the rendered copies, outputs and plots in
    python notebooks/_build.py --check    # exit 1 when a committed notebook differs from its
                                          # cells here or holds outputs

Needs nbformat, nbclient and ipykernel (in the test extra: ``pip install -e ".[test]"``) and
the DyLAN logs in ``../shared/data/dylan_math`` beside the repository (without them, the
3-file slice in ``tests/data/dylan_math``). The notebooks run in a
kernel of this interpreter (``sys.executable``), whatever kernels Jupyter has installed, with
``FASTUQ_REPO`` set to the repository (Jupyter, which starts a notebook in its own folder,
needs no such variable). ``tests/test_notebooks.py`` executes them with :func:`execute`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RENDERED = HERE / "rendered"

# ----------------------------------------------------------------------------- shared cells

LOCATE = '''%matplotlib inline
import os
from pathlib import Path

# The DyLAN logs sit beside the repository, in ../shared/data/dylan_math (48 files, 4,800
# debates). A checkout without that folder (a CI clone, say) uses the 3-file slice of the
# same logs that the tests carry (tests/data/dylan_math), and says so. Jupyter starts a
# notebook in its own folder (notebooks/); the test suite runs it in a scratch folder and
# names the repository in FASTUQ_REPO.
REPO = Path(os.environ.get("FASTUQ_REPO") or Path.cwd().parent).resolve()
DYLAN = REPO.parent / "shared" / "data" / "dylan_math"
if not DYLAN.is_dir():
    DYLAN = REPO / "tests" / "data" / "dylan_math"
    print(f"../shared/data/dylan_math is not beside the repository: using the slice {DYLAN}")
if not any(DYLAN.glob("*.json")):
    raise FileNotFoundError(f"no DyLAN logs at {DYLAN}")'''

IMPORT_DYLAN = '''import time
import numpy as np
import polars as pl
import matplotlib.pyplot as plt
import fastuq
from fastuq import evaluation as ev
from fastuq.importers import import_dylan

start = time.perf_counter()
corpus = import_dylan(DYLAN)
CORPUS = "DyLAN MATH logs (GPT-3.5)"
N = corpus.num_rows
print(f"imported {N:,} trajectories from {len(list(DYLAN.glob('*.json')))} files "
      f"in {time.perf_counter() - start:.1f} s")'''

# ------------------------------------------------------------------ 01: rescoring DyLAN logs

RESCORING = [
    ("markdown", """# Rescoring the DyLAN MATH logs and comparing estimators

The public DyLAN logs (SALT-NLP/DyLAN, GPT-3.5 on 4,800 MATH test problems; a team of 4
agents, at most 3 rounds, stopping early on consensus) are imported into a canonical corpus,
scored by every estimator whose inputs they hold, and evaluated against their labels (the
final answer checked against the MATH solution's boxed answer). Two plots compare the
estimators: risk-coverage (accuracy of the most certain fraction kept) and reliability
(calibration after Platt scaling).

The logs have no token log-probabilities, so SAUCE runs with a constant observation noise
`R_t = 0.1` in place of token entropy (so does UAAD's entropy term), and the estimators that
need log-probabilities (UMAS, MSP, perplexity) cannot run."""),
    ("code", LOCATE),
    ("code", IMPORT_DYLAN),
    ("markdown", """What the corpus holds: trajectories per number of rounds DyLAN ran (it stops early
when the agents agree), and the accuracy of each."""),
    ("code", '''rounds = corpus["agreement"].to_pylist()
summary = (pl.DataFrame({"rounds": [len(r) for r in rounds],
                         "correct": corpus["correct"].to_numpy()})
           .group_by("rounds").agg(pl.len().alias("trajectories"),
                                   (pl.col("correct").mean() * 100).round(2).alias("accuracy %"))
           .sort("rounds"))
print(f"{N:,} trajectories, {len(set(corpus['question_id'].to_pylist())):,} questions, "
      f"accuracy {corpus['correct'].to_numpy().mean() * 100:.2f}%")
summary'''),
    ("markdown", """Score every estimator the corpus supports. `fastuq.score(..., "all")` picks them; the
table is what `fastuq eval CORPUS --method all --observation-noise 0.1` prints (AUROC, AUARC,
PRR, Brier-Platt and ECE in percent; higher is better except Brier-Platt and ECE)."""),
    ("code", '''NOISE = 0.1
start = time.perf_counter()
scores = pl.from_arrow(fastuq.score(corpus, "all", observation_noise=NOISE))
names = [c for c in scores.columns if c in fastuq.ESTIMATORS]
labels = scores["correct"].to_numpy()
print(f"scored {N:,} trajectories x {len(names)} estimators in "
      f"{time.perf_counter() - start:.1f} s (first call includes compilation)")
print("not scored (inputs missing):", ", ".join(n for n in fastuq.ESTIMATORS if n not in names))
# eval's columns: every declared score, the round means (*_mean) too
from fastuq.engine.registry import score_outputs

table = ev.evaluation_table(labels, scores.select(score_outputs(scores.columns)))
print(ev.format_table(table))'''),
    ("markdown", """**Every estimator, and a combination of all of them.** The table holds each
registered estimator whose inputs DyLAN's logs have (SAUCE, the agreement baselines, UAAD's
risk, answer entropy and the number of answer sets, the spectral family on answer classes;
the log-probability estimators need token log-probabilities, which these logs lack). The
stack (`fastuq fit --stack`) combines every score column, the spectral family's round means
(`eigval_laplacian_mean`, ...) among them, by an L2 logistic regression fitted per protocol, cross-fitted: its AUROC below is held out (each fold scored by a model fitted on
the other folds), beside each input on the same folds, with a bootstrap interval of the
stack minus the best single column."""),
    ("code", '''from fastuq.evaluation import fit_stack

# every score column, as fastuq fit --stack takes them: the round means (*_mean) of the
# spectral family too
columns = score_outputs(scores.columns)
stack = fit_stack(scores.select(columns), labels, scores["protocol"].to_numpy(), bootstrap=200)
print(stack.summary())'''),
    ("markdown", """Agreement-based scores take few distinct values on a 4-agent team, so many
trajectories tie; AUROC counts tied pairs one half, and AUARC keeps tied trajectories in file
order. SAUCE's filter spreads the same agreement trace over more values.

**Risk-coverage.** Keep only the most certain trajectories (lowest uncertainty first) and
read the accuracy of those kept; the dashed line is the oracle, the dotted one keeps
everything."""),
    ("code", '''fig, ax = plt.subplots(figsize=(7.5, 4.8))
n = len(labels)
k = np.arange(1, n + 1)
ax.plot(k / n, np.minimum(k, labels.sum()) / k, ls="--", color="0.3", lw=1,
        label=f"oracle (AUARC {np.mean(np.minimum(k, labels.sum()) / k) * 100:.1f})")
ax.axhline(labels.mean(), ls=":", color="0.5", lw=1,
           label=f"keep all (accuracy {labels.mean() * 100:.1f})")
for name in names:
    coverage, accuracy = ev.accuracy_coverage(labels, scores[name].to_numpy())
    ax.plot(coverage, accuracy, lw=1.5, label=f"{name} (AUARC {accuracy.mean() * 100:.1f})")
ax.set_xlim(0, 1)
ax.set_ylim(0, 1.02)
ax.set_xlabel("coverage (fraction of trajectories kept, most certain first)")
ax.set_ylabel("accuracy of the kept trajectories (fraction correct)")
ax.set_title(f"Risk-coverage on the {CORPUS}, n = {n:,}", fontsize=11)
ax.grid(alpha=0.3)
ax.legend(fontsize=8, loc="lower left")
plt.show()''', {"fastuq_figure": "risk_coverage"}),
    ("markdown", """**Reliability.** Each score becomes a probability of being correct by out-of-fold
Platt scaling (5 stratified folds, seed 0: the probabilities behind Brier-Platt and ECE).
Bars: observed accuracy per probability bin; the diagonal is perfect calibration; the number
above a bar is the trajectories in that bin."""),
    ("code", '''from fastuq.metrics import platt_oof_probabilities

prob = platt_oof_probabilities(labels, scores.select(names))
fig, axes = plt.subplots(1, len(names), figsize=(3.3 * len(names), 3.8), sharey=True)
for ax, name, p in zip(axes, names, prob.T):
    b = ev.reliability_bins(labels, p, n_bins=15)
    filled = b["count"] > 0
    centers = (b["edges"][:-1] + b["edges"][1:]) / 2
    ece = np.sum(b["count"][filled] * np.abs(b["accuracy"] - b["mean_probability"])[filled]) / n
    ax.plot([0, 1], [0, 1], ls="--", color="0.5", lw=1)
    ax.bar(centers[filled], b["accuracy"][filled], width=1 / 15 * 0.9, alpha=0.8)
    for x, y, c in zip(centers[filled], b["accuracy"][filled], b["count"][filled]):
        ax.annotate(str(c), (x, y), xytext=(0, 2), textcoords="offset points", ha="center",
                    fontsize=6)
    ax.set_title(f"{name}\\nECE {ece * 100:.2f}%", fontsize=9)
    ax.set_xlabel("Platt probability of being correct")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.05)
axes[0].set_ylabel("observed accuracy (fraction correct)")
fig.suptitle(f"Reliability on the {CORPUS}, n = {n:,} (15 bins, out-of-fold Platt)",
             fontsize=11)
fig.tight_layout()
plt.show()''', {"fastuq_figure": "reliability"}),
    ("markdown", """Per MATH difficulty level (1 easiest, 5 hardest): accuracy falls with the level, and
so does the room an estimator has to rank."""),
    ("code", '''level = np.asarray(corpus["level"].to_pylist(), dtype=object)
rows = []
for lv in sorted(set(level.tolist()) - {None}):
    keep = level == lv
    t = ev.evaluation_table(labels[keep], scores.select(names).filter(pl.Series(keep)),
                            metrics=("auroc", "auarc"))
    rows.append(t.with_columns(pl.lit(str(lv)).alias("level")))
(pl.concat(rows)
 .with_columns((pl.col("auroc", "auarc", "accuracy") * 100).round(2))
 .pivot(on="estimator", index=["level", "n", "accuracy"], values="auroc")
 .sort("level"))'''),
    ("markdown", """The cells of the table above are AUROC (percent) per level. The same numbers, and a
page with every plot, come from the command line:

```bash
fastuq import dylan ../shared/data/dylan_math -o dylan.parquet
fastuq eval dylan.parquet --method all --observation-noise 0.1
fastuq report dylan.parquet --observation-noise 0.1 -o dylan.html
```"""),
    ("markdown", """**What each estimator costs on this machine.** `fastuq bench` times registered
estimators on simulated debates of the shapes you name: the kernel's median (compile time
kept apart), trajectories per second, the ratio to the memory-bandwidth floor measured in the
same run, the NumPy twin, and a plain per-trajectory Python loop in the style of the
single-model libraries (the speed-up column), checked to agree with the kernel on the
trajectories it timed. Here six estimators at a team of 4 (DyLAN's) over 3 rounds and
100,000 trajectories, to keep the notebook quick; the command line runs every registered
estimator (yours included) at the sizes of your corpora:

```bash
fastuq bench --method all --n 1e6 --rounds 3,10 --agents 3,5,16 --json bench.json --markdown
fastuq report dylan.parquet -o dylan.html --bench bench.json    # the table on the report page
```"""),
    ("code", '''from fastuq.evaluation.bench import bench_table, run_bench

bench = run_bench(["sauce", "umas", "mean_agreement", "answer_entropy", "eigval_laplacian",
                   "cocoa"], n=(100_000,), rounds=(3,), agents=(4,), repeats=3, subsample=100)
print(bench_table(bench))
assert all("error" not in row for row in bench["results"])'''),
]

# ------------------------------------------------------------- 02: lambda x q sweep and fit

SWEEP = [
    ("markdown", """# SAUCE's lambda x q: a sweep, a fit and held-out metrics

SAUCE filters the agreement trace with four parameters: the forgetting factor `lam`, the
process noise `q`, the prior variance `sigma2_0` and the prior mean `mu_0`; each protocol has
a preset (debate: `lam` 0.95, `q` 0.1). This notebook sweeps `lam` x `q` exactly (every grid
point's AUROC, no binning), fits all four parameters by gradient descent, and compares the
fitted, the sweep-selected and the preset parameters on held-out folds.

The corpus is **simulated** (`fastuq.synth`, 10,000 debates of 3 agents and 3 rounds): the
sweep is about how SAUCE weighs agreement against token entropy, and the DyLAN logs have no
token entropy. The simulator's signals are a toy with noise chosen by hand: the best point here
says nothing about real rollouts; the calls are the same on any labelled corpus."""),
    ("code", '''%matplotlib inline
import time
import numpy as np
import polars as pl
import matplotlib.pyplot as plt
import fastuq
from fastuq.fit import fit_sauce
from fastuq.synth import corpus, write
from fastuq.engine.packed import pack_corpus
from fastuq.sweeps import load_sauce_data, sweep

write(corpus(10_000, protocol="debate", seed=11), "debates.parquet")
# `fastuq pack debates.parquet -o debates.fqpack`: checked and packed once, then every run
# below (the sweep's data, the fitted scores) reads the memory-mapped pack
pack_corpus("debates.parquet", "debates.fqpack")
data = load_sauce_data("debates.fqpack")
CORPUS = "simulated debates (fastuq.synth, seed 11)"
N = data.n
PRESET = dict(fastuq.PRESETS["debate"])
print(f"{N:,} trajectories, accuracy {data.labels.mean() * 100:.2f}%; debate preset {PRESET}")'''),
    ("markdown", """The sweep: 21 values of `lam` over its whole range [0, 1] x 25 values of `q` from
1e-3 to 10 (log spaced); `sigma2_0` and `mu_0` keep the preset. `folds=5` also selects a
point on each fold's training part and scores it on the held-out fold."""),
    ("code", '''grid = {"lam": np.linspace(0.0, 1.0, 21), "q": np.geomspace(1e-3, 10.0, 25)}
start = time.perf_counter()
table = sweep(data, grid, ("auroc", "auarc"), folds=5)
print(f"swept {table.height} grid points in {time.perf_counter() - start:.1f} s")
best = table.sort("auroc", descending=True, maintain_order=True).row(0, named=True)
print(f"best point: lam {best['lam']:.3f}, q {best['q']:.4g}: AUROC {best['auroc'] * 100:.2f}; "
      f"preset: AUROC {table.preset['auroc'] * 100:.2f}")'''),
    ("markdown", """The fit: Adam on the Platt log-loss through the SAUCE filter (300 steps), all four
parameters, 5-fold cross-validated (the same stratified folds as the sweep), then refitted on
every trajectory."""),
    ("code", '''start = time.perf_counter()
fit = fit_sauce(data, folds=5)
print(f"fitted in {time.perf_counter() - start:.1f} s")
print(fit.summary())
FITTED = fit.params["debate"]'''),
    ("markdown", """**The heatmap.** Exact AUROC at every grid point; the white cross is the debate
preset, the red star the fitted point (its `sigma2_0` and `mu_0` are fitted too, so its own
AUROC, in the legend, can differ from the cell it falls in), the black circle the best grid
point."""),
    ("code", '''lams, qs = np.unique(table["lam"].to_numpy()), np.unique(table["q"].to_numpy())
z = (table.sort(["q", "lam"])["auroc"].to_numpy().reshape(qs.size, lams.size)) * 100


def edges(v, log=False):
    v = np.log(v) if log else v
    mid = (v[1:] + v[:-1]) / 2
    e = np.concatenate([[2 * v[0] - mid[0]], mid, [2 * v[-1] - mid[-1]]])
    return np.exp(e) if log else e


fitted_scores = fastuq.score("debates.fqpack", "sauce", **FITTED)["sauce"].to_numpy()
fitted_auroc = fastuq.metrics.auroc(data.labels, fitted_scores) * 100
fig, ax = plt.subplots(figsize=(7.5, 5))
mesh = ax.pcolormesh(edges(lams), edges(qs, log=True), z, cmap="viridis", shading="flat")
fig.colorbar(mesh, ax=ax, label="AUROC (percent, exact)")
ax.set_yscale("log")
ax.plot(PRESET["lam"], PRESET["q"], "X", color="white", mec="black", ms=12, ls="none",
        label=f"debate preset (AUROC {table.preset['auroc'] * 100:.2f})")
ax.plot(best["lam"], best["q"], "o", mfc="none", mec="black", ms=13, mew=2, ls="none",
        label=f"best grid point (AUROC {best['auroc'] * 100:.2f})")
ax.plot(FITTED["lam"], FITTED["q"], "*", color="red", mec="black", ms=16, ls="none",
        label=f"fitted, all 4 parameters (AUROC {fitted_auroc:.2f})")
ax.set_xlabel("lam (forgetting factor, unitless)")
ax.set_ylabel("q (process noise variance, log scale)")
ax.set_title(f"SAUCE AUROC over lam x q on {CORPUS}, n = {N:,}", fontsize=10)
ax.legend(fontsize=8, loc="lower left", framealpha=0.9)
plt.show()''', {"fastuq_figure": "sweep_heatmap"}),
    ("markdown", """**Held-out.** On each of the 5 folds: the preset, the grid point best on the other
four folds, and the parameters fitted on the other four folds, each scored on the held-out
fold (AUROC, percent). In-sample numbers, as in the heatmap, flatter the selected points;
these do not."""),
    ("code", '''cv = table.cv.folds
heldout = fit.heldout.filter(pl.col("protocol") == "all").sort("split")
folds = pl.DataFrame({
    "fold": cv["fold"],
    "preset": cv["preset_heldout_auroc"] * 100,
    "sweep-selected": cv["heldout_auroc"] * 100,
    "fitted": heldout["auroc_fitted"].to_numpy() * 100,
    "selected lam": cv["lam"], "selected q": cv["q"],
})
print(f"mean held-out AUROC: preset {folds['preset'].mean():.2f}, sweep-selected "
      f"{folds['sweep-selected'].mean():.2f}, fitted {folds['fitted'].mean():.2f}")
folds.with_columns(pl.col("preset", "sweep-selected", "fitted").round(2))'''),
    ("code", '''fig, ax = plt.subplots(figsize=(6.5, 3.8))
x = folds["fold"].to_numpy()
for j, (col, marker) in enumerate((("preset", "X"), ("sweep-selected", "o"), ("fitted", "*"))):
    ax.plot(x + (j - 1) * 0.12, folds[col].to_numpy(), marker, ms=10, ls="none",
            label=f"{col} (mean {folds[col].mean():.2f})")
ax.set_xticks(x)
ax.set_xlabel("held-out fold (5 stratified folds, seed 0)")
ax.set_ylabel("AUROC on the held-out fold (percent)")
ax.set_title(f"Held-out AUROC, fitted vs preset, {CORPUS}, n = {N:,}", fontsize=10)
ax.grid(alpha=0.3)
ax.legend(fontsize=8)
plt.show()''', {"fastuq_figure": "heldout"}),
    ("markdown", """From the command line:

```bash
fastuq pack debates.parquet -o debates.fqpack   # once; the runs below read the pack
fastuq sweep debates.fqpack --lam 0:1:21 --q 1e-3:10:25 --log q --folds 5 --plot heatmap.png
fastuq fit debates.fqpack --folds 5 -o params.json
fastuq eval debates.fqpack --params params.json
fastuq report debates.fqpack --grid lam=0:1:21 --grid q=1e-3:10:25 --log q -o report.html
```"""),
]

# ------------------------------------------------------------------ 03: budget-policy replay

REPLAY = [
    ("markdown", """# Budget-policy replay on the DyLAN MATH logs

A saved debate holds every round a stopping policy could have stopped after, so a policy can be
replayed on it: what accuracy would the answer at its stop have had, and how many model calls
would it have spent? `fastuq.replay` answers this for whole parameter grids at once:

* `fixed`: stop after round r (r = 1, 2, 3 rounds);
* `uaad`: UAAD's consensus stop (dominant share at least `tau_c` and moved at most
  `epsilon` since the previous round), a 32 x 32 grid;
* `uaad_route`: the same under UAAD's round-0 risk routing (the risk's tier caps the rounds);
* `trace:sauce`, `trace:mean_agreement`: stop at the first round whose uncertainty so far is
  at most a threshold (32 quantiles of the per-round scores).

DyLAN prunes agents and stops on consensus itself, so calls are counted as the answers actually
given (`calls="nodes"`). The logs have no token entropy: SAUCE and UAAD's entropy term use a
constant observation noise of 0.1."""),
    ("code", LOCATE),
    ("code", IMPORT_DYLAN.replace("import polars as pl\nimport matplotlib.pyplot as plt\n",
                                  "import polars as pl\n").replace(
        "from fastuq import evaluation as ev\n", "")),
    ("code", '''from fastuq.replay import Policy, plot_replay, replay

policies = ["fixed", Policy("uaad"), Policy("uaad_route"),
            Policy("trace", estimator="sauce"), Policy("trace", estimator="mean_agreement")]
start = time.perf_counter()
result = replay(corpus, policies, calls="nodes", observation_noise=0.1)
rows = pl.from_arrow(result.table)
print(f"replayed {rows.height:,} policy points over {N:,} debates in "
      f"{time.perf_counter() - start:.1f} s")
full = result.full
print(f"the full debate: accuracy {full['accuracy'] * 100:.2f}%, "
      f"{full['calls_mean']:.2f} calls per question")
for note in result.notes:
    print("note:", note)'''),
    ("markdown", """**The Pareto plot.** Every policy point (accuracy of the answer at the stop against
the mean calls per question); the black steps join the points no other point beats on both;
the red star is the full debate as logged."""),
    ("code", '''from IPython.display import Image, display

plot_replay(result, "replay.png",
            title=f"Accuracy vs model calls, {CORPUS}, n = {N:,} "
                  f"(calls = answers given, noise 0.1)")
display(Image(filename="replay.png"))''', {"fastuq_figure": "pareto"}),
    ("markdown", """The Pareto front, cheapest first, and for each policy its cheapest point that is at
least as accurate as the full debate (calls saved against it, and flips: trajectories whose
answer was right at an earlier round and wrong at the stop)."""),
    ("code", '''def readable(df: pl.DataFrame) -> pl.DataFrame:
    """One row per policy point: the policy, its parameters, accuracy (%), calls per
    question, calls saved against the full debate (%), flips."""
    return df.select(
        pl.when(pl.col("estimator").is_null()).then(pl.col("policy"))
          .otherwise(pl.format("{}:{}", "policy", "estimator")).alias("policy"),
        pl.coalesce(pl.format("rounds {}", "rounds"),
                    pl.format("tau_c {}, epsilon {}", pl.col("tau_c").round(3),
                              pl.col("epsilon").round(3)),
                    pl.format("threshold {}", pl.col("threshold").round(4))).alias("point"),
        (pl.col("accuracy") * 100).round(2).alias("accuracy %"),
        pl.col("calls_mean").round(2).alias("calls per question"),
        (pl.col("calls_saved_frac") * 100).round(1).alias("calls saved %"),
        "flips",
    )


readable(pl.from_arrow(result.front()))'''),
    ("code", '''(readable(rows.filter(pl.col("accuracy") >= full["accuracy"]).sort("calls_mean"))
 .group_by("policy", maintain_order=True).first())'''),
    ("markdown", """From the command line (with `--calls nodes` and the same policies):

```bash
fastuq import dylan ../shared/data/dylan_math -o dylan.parquet
fastuq replay dylan.parquet --policy fixed --policy uaad --policy uaad_route \\
    --policy trace:sauce --policy trace:mean_agreement --calls nodes \\
    --observation-noise 0.1 -o replay.parquet --plot replay.png
```"""),
]

# ------------------------------------------------ 04: the consistency gate on a sampled-CoT log

SELF_CONSISTENCY = [
    ("markdown", """# A consistency gate on a self-consistency log

A self-consistency run samples `k` chain-of-thought completions per question and answers by
majority vote. Its saved log, in the layout of the math-evaluation-harness
(ZubinGou/math-evaluation-harness, whose `math_eval.py --n_sampling k --save_outputs` writes
one JSON line per question: `idx`, `question`, `gt`, the `k` completions in `code`, the
harness's own `pred` and `score`), is imported with a generic mapping into the canonical
schema (protocol `self_consistency`: round 0 holds the `k` samples, `final_answer` is the
majority answer, `correct` checks it against `gt`).

The gate scores each question's answer by its **consistency** with the samples: the mean over
the samples of their agreement with the candidate (equivalent final answers 1, different 0;
token-set Jaccard only where a text states no answer). It then calibrates a threshold on
half of the questions, so that among the questions it passes the failure rate stays at most
`alpha` with probability `1 - delta`, and applies it to the other half.

The log here is the small one the tests carry (`tests/data/math_eval_harness`: 32 questions,
`k = 4`, written by hand in that layout), so the numbers are an illustration of the path,
not a measurement."""),
    ("code", r"""import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from fastuq.decisions import Gate, consistency_scores
from fastuq.importers import import_generic

REPO = Path(os.environ.get("FASTUQ_REPO") or Path.cwd().parent).resolve()
LOG = REPO / "tests" / "data" / "math_eval_harness"
corpus = pl.from_arrow(import_generic(LOG / "gsm8k_sc.jsonl", config=LOG / "map.toml"))
print(f"imported {corpus.height} questions, k = {corpus['n_agents'].unique().to_list()} "
      f"samples each; protocol {corpus['protocol'].unique().to_list()}; "
      f"majority-vote accuracy {corpus['correct'].mean():.3f}")
corpus.select("trajectory_id", "reference", "final_answer", "correct").head(4)"""),
    ("code", r"""# the candidate: the majority answer; the samples: round 0's texts
samples = corpus["texts"].list.first()
scores = consistency_scores(corpus["final_answer"], samples)
correct = corpus["correct"].to_numpy()
print("consistency of the right answers:", np.round(np.sort(scores[correct]), 2))
print("consistency of the wrong answers:", np.round(np.sort(scores[~correct]), 2))

# calibrate on one half (a seeded random split), apply on the other. With 16 calibration
# items the whole delta goes to one fixed sequence from the strictest level (the default,
# multi_start, splits delta over 4 starts: too little for so few items)
ALPHA, DELTA = 0.2, 0.2
order = np.random.default_rng(0).permutation(corpus.height)
cal, test = order[: corpus.height // 2], order[corpus.height // 2:]
gate = Gate(ALPHA, DELTA, higher_passes=True, procedure="fixed_sequence")
gate.calibrate(scores[cal], correct[cal])
result = gate.calibrations_[None]
passed = gate.apply(scores[test])
failures = int((~correct[test][passed]).sum())
print(f"calibrated on {cal.size} questions: threshold {result.threshold}, "
      f"{result.n_passed} of them passed")
print(f"applied to the other {test.size}: {int(passed.sum())} passed, {failures} of them "
      f"wrong: observed failure rate among passed "
      f"{failures / max(int(passed.sum()), 1):.3f} (target <= {ALPHA}, with probability "
      f">= {1 - DELTA}); accuracy of all {test.size}: {correct[test].mean():.3f}")"""),
    ("code", r"""fig, ax = plt.subplots(figsize=(7, 4))
bins = np.linspace(0, 1, 9)
ax.hist([scores[correct], scores[~correct]], bins=bins, label=["right answer", "wrong answer"],
        color=["tab:green", "tab:red"], rwidth=0.9)
ax.axvline(result.threshold, color="k", ls="--", lw=1,
           label=f"calibrated threshold {result.threshold:.2f} (passes >=)")
ax.set_xlabel("consistency of the majority answer with its k = 4 samples")
ax.set_ylabel("questions")
ax.set_title(f"Consistency gate on a self-consistency log, n = {corpus.height}", fontsize=11)
ax.legend(fontsize=8, loc="upper left")
plt.show()""", {"fastuq_figure": "consistency_histogram"}),
    ("markdown", """From the command line, the same import and gate (the gate computes the
consistency column itself from a `self_consistency` corpus):

```bash
fastuq import generic --config tests/data/math_eval_harness/map.toml \\
    tests/data/math_eval_harness/gsm8k_sc.jsonl -o sc.parquet
fastuq gate calibrate sc.parquet --score consistency --alpha 0.2 --delta 0.2 \\
    --procedure fixed_sequence -o gate.json
fastuq gate apply gate.json NEW.parquet -o verdicts.parquet
```"""),
]

OPENAI = [
    ("markdown", """# A debate logged in the OpenAI shape, with log-probabilities

Many runs log each model call as the API returned it: one JSON line per response in the
chat-completions shape (`choices[0].message.content`, and with `logprobs=true,
top_logprobs=k` the list `choices[0].logprobs.content[]` of `token`, `logprob`, `bytes`,
`top_logprobs`), next to the fields that place it in the debate: here `trajectory_id`,
`round`, `agent` and `gold` (other names: `fastuq import openai --map KEY=FIELD`).
`fastuq import openai` turns such a log into the canonical corpus with the log-probability
columns: `seq_logprob`, `n_tokens`, `node_entropy` and the per-round `token_entropy` (over the
returned top-k, renormalised: biased low against the full-vocabulary entropy),
`answer_logprob` (the tokens of the parsed answer). Then every estimator runs on it: `score
--method all` (UMAS, MSP, perplexity, mean token entropy, BCCS, SAUCE, ...) and `eval`.

The log here is **simulated** (seeded): 60 debates of 3 agents over 2 rounds, written in the
chat-completions shape by the first cell, each agent right with a per-question probability
and less sure of its answer token when wrong. The numbers illustrate the path, they measure
nothing."""),
    ("code", r"""import json
import tempfile
from pathlib import Path

import numpy as np

WORK = Path(tempfile.mkdtemp(prefix="fastuq_openai_"))
LOG = WORK / "responses.jsonl"
rng = np.random.default_rng(7)


def token(text, lp, alt):
    # one entry of choices[0].logprobs.content: the chosen token and its top-2
    return {"token": text, "logprob": lp, "bytes": list(text.encode()),
            "top_logprobs": [{"token": text, "logprob": lp, "bytes": list(text.encode())},
                             {"token": "?", "logprob": alt, "bytes": [63]}]}


def response(answer, sure):
    lp = float(np.log(sure))
    alt = float(np.log1p(-sure)) if sure < 1 else -9999.0
    toks = [token("So", -0.3, -1.4), token(" \\boxed{", -0.05, -3.0),
            token(answer, lp, alt), token("}", -0.01, -5.0)]
    return {"object": "chat.completion", "model": "simulated",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": f"So \\boxed{{{answer}}}"},
                         "logprobs": {"content": toks}}]}


with open(LOG, "w") as fh:
    for i in range(60):
        gold, skill = int(rng.integers(10, 99)), rng.uniform(0.2, 0.95)
        said = [gold if rng.random() < skill else gold + int(rng.integers(1, 3))
                for _ in range(3)]
        for rnd in range(2):
            if rnd == 1:  # each agent moves to the round-0 majority with probability .6
                major = max(set(said), key=said.count)
                said = [major if rng.random() < 0.6 else a for a in said]
            for agent, ans in zip("abc", said):
                sure = rng.uniform(0.6, 0.99) if ans == gold else rng.uniform(0.15, 0.7)
                line = {"trajectory_id": f"q{i}", "round": rnd, "agent": agent,
                        "gold": str(gold), **response(str(ans), sure)}
                fh.write(json.dumps(line) + "\n")
print(f"wrote {LOG.name}: {sum(1 for _ in open(LOG))} responses")"""),
    ("code", r"""from fastuq.cli import main

CORPUS, SCORES = str(WORK / "debate.parquet"), str(WORK / "debate_scores.parquet")
assert main(["import", "openai", str(LOG), "-o", CORPUS]) == 0
assert main(["score", CORPUS, "--method", "all", "-o", SCORES]) == 0
assert main(["eval", CORPUS, "--scores", SCORES]) == 0"""),
    ("code", r"""import matplotlib.pyplot as plt
import polars as pl

corpus = pl.read_parquet(CORPUS)
scores = pl.read_parquet(SCORES).join(corpus.select("trajectory_id", "correct"),
                                      on="trajectory_id")
print(corpus.select("trajectory_id", "agreement", "seq_logprob", "answer_logprob",
                    "token_entropy").head(3))
fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
for ax, name in zip(axes, ("umas", "msp_final")):
    for ok, color, label in ((True, "tab:green", "right"), (False, "tab:red", "wrong")):
        ax.hist(scores.filter(pl.col("correct") == ok)[name].to_numpy(), bins=12,
                color=color, alpha=0.6, label=f"{label} final answer")
    ax.set_xlabel(f"{name} (uncertainty)")
    ax.set_ylabel("debates")
    ax.legend(fontsize=8)
fig.suptitle("UMAS and MSP on a simulated OpenAI-shape debate log", fontsize=11)
plt.show()""", {"fastuq_figure": "openai_scores"}),
]

#: Notebook file -> its cells: ``(kind, source)`` or ``(kind, source, metadata)``. A code cell
#: whose metadata names a ``fastuq_figure`` must draw exactly one figure (the tests check).
NOTEBOOKS: dict[str, list[tuple]] = {
    "01_rescoring.ipynb": RESCORING,
    "02_sweep_fit.ipynb": SWEEP,
    "03_replay.ipynb": REPLAY,
    "04_self_consistency.ipynb": SELF_CONSISTENCY,
    "05_openai_logprobs.ipynb": OPENAI,
}


# ------------------------------------------------------------------------------ machinery


def build(name: str):
    """The notebook ``name`` from its cells, without outputs, with stable cell ids (so that
    the file is the same byte for byte each time)."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    stem = name.split("_", 1)[0]
    for i, cell in enumerate(NOTEBOOKS[name]):
        kind, source, *rest = cell
        make = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
        c = make(source, metadata=dict(rest[0]) if rest else {})
        c["id"] = f"nb{stem}-{i:02d}"
        nb.cells.append(c)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def text(nb) -> str:
    """The file content of a notebook, as written to git."""
    import nbformat

    return nbformat.writes(nb) + "\n"


def differences(path: str | Path) -> list[str]:
    """What differs between the notebook file at ``path`` and what its cells here give
    (cells, their kinds, sources, ids and metadata; the kernel), and any outputs or execution
    counts it holds; empty when it is as built. Compared as notebooks, not as text, so that
    another nbformat version's JSON layout is no difference."""
    import nbformat

    path = Path(path)
    if not path.exists():
        return [f"{path.name}: missing"]
    have = nbformat.read(path, as_version=4)
    want = build(path.name)
    problems = []
    if len(have.cells) != len(want.cells):
        problems.append(f"{len(have.cells)} cells, its source has {len(want.cells)}")
    for i, (h, w) in enumerate(zip(have.cells, want.cells)):
        for key in ("cell_type", "source", "id", "metadata"):
            if h.get(key) != w.get(key):
                problems.append(f"cell {i}: {key} differs")
        if h.cell_type == "code" and (h.outputs or h.execution_count is not None):
            problems.append(f"cell {i}: holds outputs (git keeps notebooks without them)")
    if have.metadata.get("kernelspec") != want.metadata["kernelspec"]:
        problems.append("kernelspec differs")
    return [f"{path.name}: {p}" for p in problems]


def execute(nb, workdir: str | Path, *, repo: str | Path = REPO, timeout: int = 600):
    """Execute ``nb`` in place in a fresh kernel of this interpreter (``sys.executable``),
    working in ``workdir``, with ``FASTUQ_REPO=repo``; a cell that raises raises
    :class:`nbclient.exceptions.CellExecutionError`. Returns ``nb``."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    with tempfile.TemporaryDirectory(prefix="fastuq-kernel-") as tmp:
        spec = Path(tmp) / "fastuq-python"
        spec.mkdir()
        (spec / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": f"Python ({sys.executable})",
            "language": "python",
            "env": {"FASTUQ_REPO": str(Path(repo).resolve())},
        }))
        # IPC sockets in the scratch folder (TCP on localhost would work too, but ipykernel
        # warns about unencrypted TCP on every start)
        km = AsyncKernelManager(kernel_name="fastuq-python", transport="ipc",
                                ip=str(Path(tmp) / "kernel"),
                                kernel_spec_manager=KernelSpecManager(kernel_dirs=[tmp]))
        client = NotebookClient(nb, km=km, timeout=timeout, kernel_name="fastuq-python",
                                resources={"metadata": {"path": str(workdir)}})
        client.execute(cleanup_kc=True)  # shut the kernel down: this manager is ours
    return nb


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring); returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--render", action="store_true",
                      help=f"execute each notebook into {RENDERED.relative_to(REPO)}/")
    mode.add_argument("--check", action="store_true",
                      help="exit 1 when a committed notebook is not what its cells here give")
    p.add_argument("names", nargs="*", metavar="NAME", help="notebooks (default: all)")
    args = p.parse_args(argv)
    names = args.names or list(NOTEBOOKS)
    unknown = [n for n in names if n not in NOTEBOOKS]
    if unknown:
        p.error(f"unknown notebook(s) {unknown}; known: {list(NOTEBOOKS)}")
    if args.check:
        problems = [p for n in names for p in differences(HERE / n)]
        for p in problems:
            print(p, file=sys.stderr)
        if problems:
            print("run python notebooks/_build.py to rewrite them from their cells",
                  file=sys.stderr)
        return 1 if problems else 0
    if args.render:
        import time

        import nbformat

        RENDERED.mkdir(exist_ok=True)
        for n in names:
            start = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix="fastuq-nb-") as work:
                nb = execute(build(n), work)
            nbformat.write(nb, str(RENDERED / n))
            print(f"rendered {RENDERED / n} in {time.perf_counter() - start:.1f} s")
        return 0
    for n in names:
        (HERE / n).write_text(text(build(n)))
        print(f"wrote {HERE / n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
