"""The README runs: every ```bash command and ```python snippet of README.md, on small data.

Each fenced block of the README is found and handled here, or the test fails:

* ``bash``: each command line (``\\`` continuations joined, ``# ...`` comments dropped, ``&&``
  chains split into their steps) is run in a scratch copy of a folder holding the README's
  file names (:data:`PLACEHOLDERS`: how each is made), ``fastuq ...`` through
  ``fastuq.cli.main`` in this process (the function the ``fastuq`` script calls; one test
  runs the script itself), with exit status 0 and every output it names (``-o``, ``--json``,
  ``--plot``, ``--plots``) written. Steps that need what a test cannot have are listed in
  :data:`EXCLUDED` with the reason; steps that fail because of known bugs fixed elsewhere are
  in :data:`XFAIL` (strict: they must fail until the fix lands).
* ``python``: each snippet runs in a fresh interpreter (a snippet registers an estimator or
  splits the CPU into devices: process state) in the same scratch folder, after the
  definitions of :data:`PY_PRELUDE` for names the README leaves to the reader, with the
  substitutions of :data:`PY_SUBSTITUTIONS` (smaller sizes) and without the lines of
  :data:`EXCLUDED`.
* ``toml``: the generic importer's mapping, used to import a log written for it.
* unlabelled blocks: the error message of a bad record (compared with what ``fastuq score``
  prints for the same record) or text listed in :data:`NOT_CODE`.
* ``fastuq ...`` code spans of the prose: the commands (synopses with CORPUS or LOGS made
  concrete) are run as in :data:`INLINE`; names of commands and options are in
  :data:`MENTIONS`.

The Ray section (two ``fastuq score --engine ray`` commands and a snippet) runs in one extra
process, sharing one local Ray instance.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fastuq.cli import main

CHECKOUT = Path(__file__).resolve().parents[1]
README = CHECKOUT / "README.md"
DATA = Path(__file__).resolve().parent / "data"
DYLAN_LOGS = DATA / "dylan_math"

# --------------------------------------------------------------------------- the README


@dataclass(frozen=True)
class Block:
    """A fenced block of the README: its language tag, first line number and text."""

    lang: str
    line: int
    text: str


def readme_blocks() -> list[Block]:
    """Every fenced block of README.md, in order."""
    blocks, lang, start, body = [], None, 0, []
    for number, line in enumerate(README.read_text(encoding="utf-8").splitlines(), 1):
        if lang is None:
            m = re.match(r"^```\s*(\S*)\s*$", line)
            if m:
                lang, start, body = m.group(1), number, []
        elif line.strip() == "```":
            blocks.append(Block(lang, start, "\n".join(body)))
            lang = None
        else:
            body.append(line)
    assert lang is None, f"README.md: the block opened at line {start} is never closed"
    return blocks


def bash_steps(block: Block) -> list[str]:
    """The steps of a bash block: one per command line (continuations joined, comments
    dropped), ``&&`` chains split; each as its ``shlex.join``."""
    steps = []
    for line in block.text.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            steps.append(shlex.join(words[:cut]))
            words = words[cut + 1:]
    return steps


# ----------------------------------------------------------------------------- the tables

#: Steps and Python lines of the README that are not run here, and why.
EXCLUDED: dict[str, str] = {
    "python3 -m venv .venv": "creates a virtual environment (the tests run in one already)",
    ". .venv/bin/activate": "activates that environment",
    "pip install .": "installs from a package index (network); the tests run installed",
    "pip install '.[test]'": "installs from a package index (network)",
    "ruff check .": "lints the source tree; CI (.ci/run) runs it",
    "pytest": "the whole suite, this module included (10+ minutes)",
    "ray start --head --port=6379 --num-cpus=0 --object-store-memory=4000000000":
        "starts a Ray cluster's head node",
    "ray start --address=HEAD_IP:6379 --object-store-memory=16000000000":
        "joins a worker node to a Ray cluster (HEAD_IP)",
    "fastuq score --engine ray /shared/corpus/ -o /shared/scores/ --method sauce,umas "
    "--on-error skip": "needs a Ray cluster and a file system every node mounts (/shared); "
                       "the same command on a local Ray instance runs below",
    'fastuq.ray.score_dataset(ray.data.read_parquet("s3://bucket/corpus/"), "sauce")  '
    "# any Dataset": "reads from S3 (network)",
    "python notebooks/_build.py": "rewrites the checkout's notebooks/*.ipynb; --check, run "
                                  "here, compares them with their cells",
    "python notebooks/_build.py --render": "executes every notebook (about a minute) with the "
                                           "DyLAN logs beside the repository; "
                                           "tests/test_notebooks.py executes them",
}

#: Steps that fail today because of bugs other changes fix (strict xfail: remove the entry
#: when the fix lands).
XFAIL: dict[str, str] = {}

#: Unlabelled blocks that are no commands, by their first line.
NOT_CODE: dict[str, str] = {
    "R_t     = max(H_t, 1e-8)": "SAUCE's filter equations",
    "fastuq/             the public API (fastuq.score, sauce, sauce_batch, register_estimator, "
    "...)": "the source tree's layout",
    "answer_entropy  = -sum_k (c_k/n) ln(c_k/n) - (silent/n) ln(1/n)   discrete semantic "
    "entropy": "the answer-set estimators' definitions",
}

#: README file names and how each is made (in :func:`base_folder`).
PLACEHOLDERS: dict[str, str] = {
    "corpus.parquet": "fastuq.synth.corpus_with_beliefs(600, protocol='mixed', "
                      "questions_per_id=4): labels, answers, beliefs, node log-probabilities",
    "rollouts.jsonl.gz": "corpus.parquet as gzipped JSON Lines",
    "corpus.jsonl.gz": "corpus.parquet as gzipped JSON Lines",
    "dylan.parquet": "fastuq import dylan tests/data/dylan_math -o dylan.parquet (the "
                     "README's import command on the DyLAN logs' test slice, 44 questions)",
    "scores.parquet": "fastuq score corpus.parquet -o scores.parquet --method all",
    "expected.json": "sauce's AUROC and AUARC from fastuq eval corpus.parquet --json, "
                     "in percent to 2 decimals",
    "params.json": "fastuq fit corpus.parquet --steps 30 -o params.json",
    "gate.json": "fastuq gate calibrate corpus.parquet --score sauce --by protocol -o gate.json",
    "scored.parquet": "trajectory_id, correct and consistency (fastuq.gate.consistency_scores"
                      ") of fastuq.synth.self_consistency.self_consistency_corpus(300)",
    "corpus/": "corpus.parquet in two Parquet files",
    "shards/*.parquet": "corpus.parquet in two Parquet files",
    "bad.jsonl": "10 records r0..r9; r7's agreement in round 0 is 1.5",
    "CORPUS": "corpus.parquet; in the gate synopsis corpus_sauce.parquet: corpus.parquet with "
              "scores.parquet's sauce column (a corpus that holds its score column)",
    "LOGS...": "FORD's test log tests/data/ford/final/copa.jsonl (its format detected); with "
               "--config map.toml, log.jsonl",
    "corpus.jsonl": "fastuq.synth.self_consistency.self_consistency_corpus(300) as JSON Lines",
    "logs/*.json": "Du et al.'s test logs with answers (tests/data/du_gsm, du_mmlu, du_debate)",
    "path/to/exp/MATH/CoT": "the DyLAN logs' test slice, tests/data/dylan_math",
    "tests/data/dylan_math": "a copy of the DyLAN logs' test slice (the tour runs from the "
                             "repository root)",
    "map.toml": "the README's TOML block",
    "log.jsonl": "4 records in the layout the README's TOML block maps",
    "calib.json": "fastuq calibrate corpus.parquet --method sauce,bccs -o calib.json",
    "stack.json": "fastuq fit --stack corpus.parquet --bootstrap 50 -o stack.json",
    "bench.json": "fastuq bench --method sauce,msp_final --n 1000 --json bench.json",
    "corpus.fqpack": "fastuq pack corpus.parquet -o corpus.fqpack",
}

#: Names the README's Python snippets leave to the reader, defined before each snippet.
PY_PRELUDE = """\
import numpy as _np
_rng = _np.random.default_rng(0)
_T, _N = 4, 6
round_mask_TN = _np.arange(_T)[:, None] < _rng.integers(1, _T + 1, _N)[None, :]
agreement_TN = _np.where(round_mask_TN, _rng.integers(1, 4, (_T, _N)) / 3, 0.0)
entropy_TN = _np.where(round_mask_TN, _rng.random((_T, _N)), 0.0)
protocols_N = _np.array(["debate", "dylan"] * (_N // 2))
lam_N = _rng.uniform(0.6, 1.0, _N)
"""

#: Substitutions in the Python snippets (smaller sizes), each of which must apply.
PY_SUBSTITUTIONS: dict[str, str] = {
    "corpus(1_000_000,": "corpus(2_000,",
}

# --------------------------------------------------------------------------- the data


def _split(table: pa.Table, folder: Path, names: tuple[str, str]) -> None:
    folder.mkdir()
    half = table.num_rows // 2
    pq.write_table(table.slice(0, half), folder / names[0])
    pq.write_table(table.slice(half), folder / names[1])


def _bad_jsonl(path: Path) -> None:
    rng = np.random.default_rng(3)
    records = [{"trajectory_id": f"r{k}", "protocol": "debate", "n_agents": 3,
                "agreement": [1 / 3, 2 / 3, 1.0], "token_entropy": rng.random(3).tolist()}
               for k in range(10)]
    records[7]["agreement"][0] = 1.5
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _generic_log(path: Path) -> None:
    records = []
    for k, (gold, picks) in enumerate([("12", [["12", "12", "7"], ["12", "12", "12"]]),
                                       ("3", [["4", "3", None], ["4", "4", "4"]]),
                                       ("5", [["5", "5", "5"]]),
                                       ("9", [["8", "9", "9"], ["9", "9", "9"]])]):
        records.append({"id": f"q{k}", "prompt": f"question {k}", "meta": {"gold": gold},
                        "verdict": picks[-1][0], "run": f"run{k}",
                        "turns": [[{"say": f"I say {p}", "pick": p} for p in rnd]
                                  for rnd in picks]})
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _run(argv: list[str]) -> None:
    rc = main(argv)
    assert rc == 0, f"fastuq {shlex.join(argv)} exited {rc}"


@pytest.fixture(scope="module")
def base_folder(tmp_path_factory) -> Path:
    """A folder holding every file of :data:`PLACEHOLDERS`."""
    import polars as pl

    from fastuq.gate import consistency_scores
    from fastuq.synth import corpus_with_beliefs
    from fastuq.synth.self_consistency import self_consistency_corpus

    base = tmp_path_factory.mktemp("readme")
    cwd = Path.cwd()
    os.chdir(base)
    try:
        table = corpus_with_beliefs(600, protocol="mixed", questions_per_id=4, seed=0)
        pq.write_table(table, "corpus.parquet")
        jsonl = pl.from_arrow(table).write_ndjson()
        for name in ("rollouts.jsonl.gz", "corpus.jsonl.gz"):
            Path(name).write_bytes(gzip.compress(jsonl.encode()))
        _split(table, Path("corpus"), ("part-0.parquet", "part-1.parquet"))
        _split(table, Path("shards"), ("a.parquet", "b.parquet"))
        shutil.copytree(DYLAN_LOGS, Path("path/to/exp/MATH/CoT"))
        shutil.copytree(DYLAN_LOGS, Path("tests/data/dylan_math"))
        _run(["import", "dylan", str(DYLAN_LOGS), "-o", "dylan.parquet"])
        _run(["score", "corpus.parquet", "-o", "scores.parquet", "--method", "all"])
        _run(["pack", "corpus.parquet", "-o", "corpus.fqpack"])
        _run(["eval", "corpus.parquet", "--json", "eval.json"])
        sauce = json.loads(Path("eval.json").read_text())["estimators"]["sauce"]
        Path("expected.json").write_text(json.dumps({
            "units": "percent", "n": table.num_rows,
            "estimators": {"sauce": {m: float((Decimal(sauce[m]) * 100).quantize(
                Decimal("0.01"), ROUND_HALF_EVEN)) for m in ("auroc", "auarc")}}}))
        Path("eval.json").unlink()
        _run(["fit", "corpus.parquet", "--steps", "30", "-o", "params.json"])
        _run(["calibrate", "corpus.parquet", "--method", "sauce,bccs", "-o", "calib.json"])
        _run(["fit", "--stack", "corpus.parquet", "--bootstrap", "50", "-o", "stack.json"])
        _run(["bench", "--method", "sauce,msp_final", "--n", "1000", "--json", "bench.json"])
        _run(["gate", "calibrate", "corpus.parquet", "--score", "sauce", "--by", "protocol",
              "-o", "gate.json"])
        sc = self_consistency_corpus(300, seed=0)
        texts = [r[0] for r in sc["texts"].to_pylist()]
        pq.write_table(pa.table({
            "trajectory_id": sc["trajectory_id"], "correct": sc["correct"],
            "consistency": consistency_scores(sc["final_answer"].to_pylist(), texts)}),
            "scored.parquet")
        scores = pq.read_table("scores.parquet")
        assert scores["trajectory_id"].equals(table["trajectory_id"])
        pq.write_table(table.append_column("sauce", scores["sauce"]), "corpus_sauce.parquet")
        pl.from_arrow(sc).write_ndjson("corpus.jsonl")
        Path("logs").mkdir()
        for name in ("du_gsm.json", "du_mmlu.json", "du_debate.json"):
            shutil.copy(DATA / name, Path("logs") / name)
        _bad_jsonl(Path("bad.jsonl"))
        toml = [b for b in readme_blocks() if b.lang == "toml"]
        assert len(toml) == 1
        Path("map.toml").write_text(toml[0].text + "\n")
        _generic_log(Path("log.jsonl"))
    finally:
        os.chdir(cwd)
    return base


@pytest.fixture
def work(base_folder, tmp_path, monkeypatch) -> Path:
    """A fresh copy of :func:`base_folder`, the working directory of the test."""
    folder = tmp_path / "work"
    shutil.copytree(base_folder, folder)
    monkeypatch.chdir(folder)
    return folder


# ------------------------------------------------------------------------ what is run

#: Bash blocks run together in one process (a local Ray instance): their steps.
RAY_STEPS = ("fastuq score --engine ray corpus/ -o scores/ --method sauce,umas --on-error skip",
             "fastuq score --engine ray 'shards/*.parquet' -o scores/")
#: The first line of the Python snippet that joins them.
RAY_SNIPPET = "import fastuq.ray"
#: Steps run from the repository root (they read repository files, writing nothing).
IN_CHECKOUT = ("python notebooks/_build.py --check",)
#: The first line of the unlabelled block that is a bad record's error message.
ERROR_LINE = "fastuq score: error: trajectory 'r7' (bad.jsonl row 7)"


def _bash_steps() -> list[str]:
    return [s for b in readme_blocks() if b.lang == "bash" for s in bash_steps(b)]


def _python_snippets() -> list[Block]:
    return [b for b in readme_blocks() if b.lang == "python"]


def _cases() -> list:
    cases = []
    for step in _bash_steps():
        if step in EXCLUDED or step in RAY_STEPS:
            continue
        marks = [pytest.mark.xfail(strict=True, reason=XFAIL[step])] if step in XFAIL else []
        cases.append(pytest.param(step, marks=marks, id=step))
    return cases


OUTPUT_FLAGS = ("-o", "--output", "--json", "--plot", "--plots")


def _outputs(words: list[str]) -> list[str]:
    return [words[k + 1] for k, w in enumerate(words[:-1]) if w in OUTPUT_FLAGS]


@pytest.mark.parametrize("step", _cases())
def test_bash_step(step, work, capsys):
    words = shlex.split(step)
    if step in IN_CHECKOUT:
        res = subprocess.run([sys.executable, *words[1:]], cwd=CHECKOUT, capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
        return
    assert words[0] == "fastuq", f"no way to run {step!r}: run it here or list it in EXCLUDED"
    rc = main(words[1:])
    out, err = capsys.readouterr()
    assert rc == 0, f"{step}\n{out}\n{err}"
    for path in _outputs(words):
        assert (work / path).exists(), f"{step}: {path} was not written"
    if "--expect" in words:
        assert out.splitlines()[-1] == "PASS"


def _python_source(block: Block) -> str:
    lines = [line for line in block.text.splitlines() if line.strip() not in EXCLUDED]
    source = "\n".join(lines) + "\n"
    for old, new in PY_SUBSTITUTIONS.items():
        if old in source:
            source = source.replace(old, new)
    return PY_PRELUDE + source


def _run_python(source: str, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-c", source], cwd=cwd, capture_output=True,
                         text=True, timeout=timeout)
    assert res.returncode == 0, f"{source}\n--- stdout\n{res.stdout}\n--- stderr\n{res.stderr}"
    return res


@pytest.mark.parametrize("block", [pytest.param(b, id=f"README.md:{b.line}")
                                   for b in _python_snippets()
                                   if b.text.splitlines()[0] != RAY_SNIPPET])
def test_python_snippet(block, work):
    _run_python(_python_source(block), work)


@pytest.mark.slow  # a local Ray instance and its worker processes
def test_ray_section(work):
    """The local Ray commands and the Ray snippet, in one process (one ``ray.init``)."""
    ray = [b for b in _python_snippets() if b.text.splitlines()[0] == RAY_SNIPPET]
    assert len(ray) == 1
    steps = [shlex.split(s)[1:] for s in RAY_STEPS]
    source = (
        "import ray\n"
        "ray.init(num_cpus=2, include_dashboard=False, object_store_memory=256 << 20,\n"
        "         log_to_driver=False)\n"
        "from fastuq.cli import main\n"
        f"for argv in {steps!r}:\n"
        "    assert main(argv) == 0, argv\n"
        + _python_source(ray[0])
    )
    _run_python(source, work, timeout=600)
    assert pq.read_table(work / "scores").num_rows == 600


def test_toml_mapping_imports(work):
    _run(["import", "generic", "--config", "map.toml", "log.jsonl", "-o", "generic.parquet"])
    table = pq.read_table(work / "generic.parquet")
    assert table["trajectory_id"].to_pylist() == ["run0", "run1", "run2", "run3"]
    assert table["reference"].to_pylist() == ["12", "3", "5", "9"]
    assert table["correct"].to_pylist() == [True, False, True, True]  # verdict == gold


def test_bad_record_message(work, capsys):
    block = [b for b in readme_blocks() if b.lang == "" and b.text.startswith(ERROR_LINE)]
    assert len(block) == 1
    assert main(["score", "bad.jsonl", "-o", "s.parquet"]) == 2
    assert block[0].text in capsys.readouterr().err.splitlines()


def test_fastuq_script(work):
    """The installed ``fastuq`` script: the README's first command."""
    script = Path(sys.executable).with_name("fastuq")
    script = str(script) if script.exists() else shutil.which("fastuq")
    assert script, "the fastuq script is not installed"
    res = subprocess.run([script, "score", "--sample"], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    assert "AUROC" in res.stdout


# -------------------------------------------------------------- nothing goes unnoticed


# ------------------------------------------------------------- commands in the prose


def inline_commands() -> list[str]:
    """The ```fastuq ...``` code spans of the README's prose (outside fenced blocks), with
    runs of whitespace made one space, in order, each once."""
    prose, inside = [], False
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            inside = not inside
        elif not inside:
            prose.append(line)
    spans = re.findall(r"`(fastuq [^`]+)`", "\n".join(prose))
    return list(dict.fromkeys(" ".join(s.split()) for s in spans))


#: The commands of the prose that are run, the README's metavariables made concrete
#: (CORPUS, LOGS, path/to/...; see PLACEHOLDERS): span -> the argument lists run in order
#: (the last is the command; earlier ones make its input; ``*`` patterns are expanded), or
#: the step of a bash block that is the same command (run by test_bash_step).
INLINE: dict[str, list[list[str]] | str] = {
    "fastuq score CORPUS -o scores.parquet": [["score", "corpus.parquet", "-o", "scores.parquet"]],
    "fastuq eval CORPUS": "fastuq eval corpus.parquet",
    "fastuq select CORPUS": [["select", "corpus.parquet"]],
    "fastuq sweep CORPUS --lam 0.5:1:32 --q 1e-3:1:32 --log q":
        [["sweep", "corpus.parquet", "--lam", "0.5:1:32", "--q", "1e-3:1:32", "--log", "q"]],
    "fastuq fit CORPUS": [["fit", "corpus.parquet"]],
    "fastuq fit --stack CORPUS -o stack.json":
        [["fit", "--stack", "corpus.parquet", "-o", "stack.json"]],
    "fastuq import [FORMAT] LOGS... -o corpus.parquet":
        [["import", "ford", "{ford}", "-o", "corpus.parquet"],
         ["import", "{ford}", "-o", "corpus.parquet"]],
    "fastuq gate CORPUS --score sauce --alpha 0.1 --delta 0.05":
        [["gate", "corpus_sauce.parquet", "--score", "sauce", "--alpha", "0.1",
          "--delta", "0.05"]],
    "fastuq replay CORPUS --policy fixed,uaad,trace:sauce --plot r.png":
        [["replay", "corpus.parquet", "--policy", "fixed,uaad,trace:sauce", "--plot", "r.png"]],
    "fastuq report CORPUS -o report.html": "fastuq report corpus.parquet -o report.html",
    "fastuq bench --n 1e4 --json bench.json": [["bench", "--n", "1e4", "--json", "bench.json"]],
    "fastuq pack CORPUS -o corpus.fqpack":
        [["pack", "corpus.parquet", "-o", "corpus.fqpack"]],
    "fastuq pack --verify PACK --source CORPUS":
        [["pack", "--verify", "corpus.fqpack", "--source", "corpus.parquet"]],
    "fastuq calibrate CORPUS --method sauce -o calib.json":
        [["calibrate", "corpus.parquet", "--method", "sauce", "-o", "calib.json"]],
    "fastuq --version": [["--version"]],
    "fastuq score --sample": "fastuq score --sample",  # the tour names the set-up's last step
    "fastuq eval corpus.parquet --scores s.parquet":  # the scores of a skip run
        [["score", "corpus.parquet", "-o", "s.parquet", "--on-error", "skip"],
         ["eval", "corpus.parquet", "--scores", "s.parquet"]],
    "fastuq gate calibrate CORPUS --score COLUMN --alpha A --delta D -o gate.json":
        [["gate", "calibrate", "corpus.parquet", "--score", "sauce", "--alpha", "0.2",
          "--delta", "0.1", "-o", "gate2.json"]],
    "fastuq gate calibrate CORPUS --score sauce -o gate.json":
        [["gate", "calibrate", "corpus.parquet", "--score", "sauce", "-o", "gate2.json"]],
    "fastuq gate apply gate.json NEW -o verdicts.parquet":
        [["gate", "apply", "gate.json", "corpus.jsonl.gz", "-o", "verdicts.parquet"]],
    "fastuq gate corpus.jsonl --score consistency":
        [["gate", "corpus.jsonl", "--score", "consistency"]],
    "fastuq import dylan path/to/exp/MATH/CoT -o dylan.parquet":
        [["import", "dylan", "{dylan_logs}", "-o", "dylan.parquet"]],
    "fastuq import du logs/*.json -o debate.parquet":
        [["import", "du", "logs/*.json", "-o", "debate.parquet"]],
    "fastuq import LOGS... -o corpus.parquet": [["import", "{ford}", "-o", "corpus.parquet"]],
    "fastuq import generic --config map.toml LOGS... -o corpus.parquet":
        [["import", "generic", "--config", "map.toml", "log.jsonl", "-o", "corpus.parquet"]],
    "fastuq import openai responses.jsonl -o debate.parquet":
        [["import", "openai", "{openai}", "-o", "debate.parquet"]],
    "fastuq score debate.parquet --method all -o debate_scores.parquet":
        [["import", "openai", "{openai}", "-o", "debate.parquet"],
         ["score", "debate.parquet", "--method", "all", "-o", "debate_scores.parquet"]],
    "fastuq eval debate.parquet --scores debate_scores.parquet":
        [["import", "openai", "{openai}", "-o", "debate.parquet"],
         ["score", "debate.parquet", "--method", "all", "-o", "debate_scores.parquet"],
         ["eval", "debate.parquet", "--scores", "debate_scores.parquet"]],
}

#: Code spans of the prose that name a command or an option, or show output: not run.
MENTIONS: frozenset[str] = frozenset({
    "fastuq eval --plots", "fastuq sweep --plot", "fastuq 0.1.0", "fastuq COMMAND: error: ...",
    "fastuq score: error: cannot write PATH: reason", "fastuq score", "fastuq fit -o",
    "fastuq gate", "fastuq eval --scores", "fastuq sweep", "fastuq fit", "fastuq eval",
    "fastuq report", "fastuq eval --by protocol", "fastuq sweep --rank auto|host|device",
    "fastuq score --pack auto|host|device", "fastuq score --method NAME",
    "fastuq COMMAND --help", "fastuq calibrate", "fastuq score ... --calibration calib.json",
    "fastuq report ... --calibration calib.json", "fastuq pack", "fastuq import dylan",
    "fastuq score --method stack --params stack.json", "fastuq fit --stack -o",
    "fastuq bench", "fastuq bench --json",
})


def _concrete(words: list[str]) -> list[str]:
    out = []
    for w in words:
        w = w.format(ford=DATA / "ford" / "final" / "copa.jsonl", dylan_logs=DYLAN_LOGS,
                     openai=DATA / "openai" / "chat_debate.jsonl")
        out.extend(sorted(glob.glob(w)) or [w] if "*" in w else [w])
    return out


@pytest.mark.parametrize("span", [s for s, run in INLINE.items() if not isinstance(run, str)])
def test_inline_command(span, work, capsys):
    for words in INLINE[span]:
        argv = _concrete(words)
        try:
            rc = main(argv)
        except SystemExit as exc:  # --version
            rc = exc.code
        out, err = capsys.readouterr()
        assert rc == 0, f"fastuq {shlex.join(argv)}\n{out}\n{err}"
    if span == "fastuq --version":
        assert out.startswith("fastuq ")


def test_every_inline_command_is_run_or_a_mention():
    spans = inline_commands()
    for span in spans:
        assert span in INLINE or span in MENTIONS, (
            f"README: `{span}` is neither run (INLINE) nor a mention (MENTIONS)")
    for entry in [*INLINE, *MENTIONS]:
        assert entry in spans, f"not in the README's prose: {entry!r}"
    steps = _bash_steps()
    for span, run in INLINE.items():
        assert not isinstance(run, str) or run in steps, f"{span}: no bash step {run!r}"


def test_every_block_is_run_or_listed():
    """A README block or step that this module neither runs nor lists fails here, and so
    does a table entry that no longer matches the README."""
    blocks = readme_blocks()
    steps = _bash_steps()
    runnable = set(steps) - set(EXCLUDED) - set(RAY_STEPS)
    for step in runnable:
        words = shlex.split(step)
        assert words[0] == "fastuq" or step in IN_CHECKOUT, (
            f"README step {step!r} is neither run (fastuq ...) nor listed in EXCLUDED")
    for b in blocks:
        if b.lang in ("bash", "python", "toml"):
            continue
        first = b.text.splitlines()[0]
        assert b.lang == "" and (first in NOT_CODE or b.text.startswith(ERROR_LINE)), (
            f"README.md:{b.line}: a ```{b.lang} block that is neither run nor in NOT_CODE")
    py_lines = {line.strip() for b in blocks if b.lang == "python"
                for line in b.text.splitlines()}
    python = "\n".join(b.text for b in blocks if b.lang == "python")
    for entry in EXCLUDED:
        assert entry in steps or entry in py_lines, f"EXCLUDED entry not in README: {entry!r}"
    for table in (XFAIL, dict.fromkeys(RAY_STEPS), dict.fromkeys(IN_CHECKOUT)):
        for entry in table:
            assert entry in steps, f"entry not in README: {entry!r}"
    for entry in NOT_CODE:
        assert any(b.text.splitlines()[0] == entry for b in blocks), entry
    for old in PY_SUBSTITUTIONS:
        assert old in python, f"PY_SUBSTITUTIONS entry not in README: {old!r}"
    for name in PLACEHOLDERS:
        assert name.rstrip("/") in README.read_text(encoding="utf-8") or name in (
            "map.toml", "log.jsonl"), name


def test_readme_dotted_names_resolve():
    """Every ``fastuq.a.b`` the README names resolves by attribute access after a bare
    ``import fastuq`` (lazily loaded submodules included), in a fresh interpreter."""
    text = README.read_text(encoding="utf-8")
    names = sorted(set(re.findall(r"\bfastuq(?:\.[A-Za-z_]\w*)+", text)))
    assert "fastuq.gate.calibrate_threshold" in names and "fastuq.replay.replay" in names
    source = (
        "import functools, sys\nimport fastuq\n"
        "assert 'jax' not in sys.modules\n"
        f"for name in {names!r}:\n"
        "    functools.reduce(getattr, name.split('.')[1:], fastuq)\n"
    )
    res = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr


def _sauce_by_hand(agreement, entropy, lam, q, sigma2_0, mu_0):
    """SAUCE from the README's equations (section "SAUCE"), one round at a time."""
    mu, sigma2, means = mu_0, sigma2_0, []
    for m, h in zip(agreement, entropy, strict=True):
        r = max(h, 1e-8)
        mu_pred, p = lam * mu, lam ** 2 * sigma2 + q
        s = p + r + 1e-8
        mu = mu_pred + p / s * (m - mu_pred)
        sigma2 = max(p * (r + 1e-8) / s, 1e-15)
        means.append(mu)
    return -sum(means) / len(means)


def test_the_python_snippets_claims():
    """The values the README's first snippet states in its comments."""
    import fastuq

    text = README.read_text(encoding="utf-8")
    line = next(x for x in text.splitlines() if x.startswith("fastuq.sauce([2 / 3, 1.0, 1.0]"))
    claimed = float(re.search(r"#\s*(-?\d+\.\d+)\.\.\.", line).group(1))
    want = _sauce_by_hand([2 / 3, 1.0, 1.0], [0.4, 0.2, 0.1], lam=0.95, q=0.1, sigma2_0=0.25,
                          mu_0=0.0)  # the README's debate preset
    assert want == pytest.approx(claimed, abs=1e-6)
    got = fastuq.sauce([2 / 3, 1.0, 1.0], [0.4, 0.2, 0.1], protocol="debate")["score"]
    assert got == pytest.approx(want, abs=1e-12)
    assert 'fastuq.majority_margin(["12", "12"], n_agents=3)        # 2/3' in text
    assert fastuq.majority_margin(["12", "12"], n_agents=3) == pytest.approx(2 / 3, abs=1e-15)
