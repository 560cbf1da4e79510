"""One exit-status rule for every ``fastuq`` subcommand, and ``fastuq --version``.

The rule (README, "Exit status"): 0 success; 2 a usage or input error (a bad option value, an
unreadable or invalid input, a record that fails validation); 1 a run that failed (an I/O
failure while writing, an internal error). Each subcommand is run here on a small corpus in
each of the three situations; a write failure is an ``OSError(ENOSPC)`` raised where every
atomic write publishes its file (``fastuq.io.writers.publish_temporary``), as a full disk would.
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fastuq.io.writers
from fastuq.cli import main, sample_corpus_path
from fastuq.engine.errors import RecordError, TooManySkipped
from fastuq.io.writers import OutputError

USAGE, FAILED = 2, 1  # the exit statuses of a usage or input error and of a failed run
DU = Path(__file__).resolve().parent / "data" / "du_gsm.json"
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """``good``: 120 rows of the bundled sample (both protocols); ``bad``: the same with row
    7's agreement outside [0, 1]; ``scores``: SAUCE scores of ``good`` (trajectory_id,
    sauce); ``badlog``: a Du et al. log that is not JSON."""
    d = tmp_path_factory.mktemp("exit")
    table = pq.read_table(sample_corpus_path()).slice(0, 120)
    rows = table.to_pylist()
    rows[7]["agreement"] = [1.5] * len(rows[7]["agreement"])
    paths = {"good": d / "good.parquet", "bad": d / "bad.parquet",
             "scores": d / "scores.parquet", "badlog": d / "bad.json"}
    pq.write_table(table, paths["good"])
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), paths["bad"])
    assert main(["score", str(paths["good"]), "-o", str(paths["scores"])]) == 0
    paths["badlog"].write_text("{nope")
    return {k: str(v) for k, v in paths.items()}


def _disk_full(monkeypatch):
    def publish(tmp, path):  # the rename fails: the temporary file goes, as in _publish
        fastuq.io.writers.discard_temporary(Path(tmp))
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(fastuq.io.writers, "publish_temporary", publish)


#: Per subcommand: (a usage error, an invalid input, a run whose output cannot be written);
#: ``{good}``, ``{bad}``, ``{scores}``, ``{badlog}``, ``{du}`` and ``{out}`` are filled in.
CASES = {
    "score": (["score", "{good}", "-o", "{out}.parquet", "--method", "sauce,nope"],
              ["score", "{bad}", "-o", "{out}.parquet"],
              ["score", "{good}", "-o", "{out}.parquet"]),
    "import": (["import", "generic", "{du}", "-o", "{out}.parquet"],
               ["import", "du", "{badlog}", "-o", "{out}.parquet"],
               ["import", "du", "{du}", "-o", "{out}.parquet"]),
    "eval": (["eval", "{good}", "--metrics", "auroc,nope"],
             ["eval", "{bad}"],
             ["eval", "{good}", "--json", "{out}.json"]),
    "select": (["select", "{good}", "--skipped", "x.jsonl"],
               ["select", "{bad}"],
               ["select", "{good}", "--json", "{out}.json"]),
    "sweep": (["sweep", "{good}", "--lam", "0.5:x:3"],
              ["sweep", "{bad}", "--lam", "0.9"],
              ["sweep", "{good}", "--lam", "0.9", "-o", "{out}.parquet"]),
    "fit": (["fit", "{good}", "--skipped", "x.jsonl"],
            ["fit", "{bad}", "--steps", "2", "--holdout", "0"],
            ["fit", "{good}", "--steps", "2", "--holdout", "0", "-o", "{out}.json"]),
    "gate": (["gate", "{good}", "--score", "sauce", "--skipped", "x.jsonl"],
             ["gate", "{good}", "--scores", "{scores}", "--score", "nope"],
             ["gate", "{good}", "--scores", "{scores}", "--score", "sauce",
              "-o", "{out}.parquet"]),
    "replay": (["replay", "{good}", "--policy", "nope"],
               ["replay", "{bad}", "--policy", "fixed"],
               ["replay", "{good}", "--policy", "fixed", "-o", "{out}.parquet"]),
    "report": (["report", "{good}", "-o", "{out}.txt"],
               ["report", "{bad}", "--method", "sauce", "-o", "{out}.html"],
               ["report", "{good}", "--method", "sauce", "-o", "{out}.html"]),
}


def _argv(template, files, tmp_path):
    return [a.format(**files, du=DU, out=tmp_path / "out") for a in template]


@pytest.mark.parametrize("command", list(CASES))
def test_usage_and_input_errors_exit_2_a_failed_write_exits_1(command, files, tmp_path,
                                                              capsys, monkeypatch):
    usage, invalid, write = (_argv(t, files, tmp_path) for t in CASES[command])
    prog = f"fastuq {command}: error: "
    assert main(usage) == USAGE
    assert prog in capsys.readouterr().err
    assert main(invalid) == USAGE
    err = capsys.readouterr().err
    assert prog in err and "Traceback" not in err
    _disk_full(monkeypatch)
    assert main(write) == FAILED
    err = capsys.readouterr().err
    assert prog in err and f"[Errno {errno.ENOSPC}] No space left on device" in err
    assert "Traceback" not in err
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(("out", ".out"))]


def test_argparse_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["score", "--dtype", "float16"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main(["nope"])
    assert info.value.code == 2


def test_an_internal_error_exits_1_with_its_traceback(files, capsys, monkeypatch):
    import fastuq.selection

    def broken(*args, **kwargs):
        raise KeyError("boom")

    monkeypatch.setattr(fastuq.selection, "best_of_k", broken)
    assert main(["select", files["good"]]) == FAILED
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError: 'boom'" in err
    assert "fastuq select: error: internal error (KeyError: 'boom')" in err


def test_a_missing_input_exits_2(tmp_path, capsys):
    missing = str(tmp_path / "missing.parquet")
    for argv in (["score", missing, "-o", str(tmp_path / "s.parquet")], ["eval", missing],
                 ["select", missing], ["replay", missing], ["fit", missing],
                 ["gate", missing, "--score", "sauce"]):
        assert main(argv) == USAGE, argv
        assert f"fastuq {argv[0]}: error: " in capsys.readouterr().err


@pytest.mark.parametrize("exc, status", [
    (ValueError("bad value"), 2),
    (RecordError("trajectory 'a', round 0: agreement = 1.5 is outside [0, 1]"), 2),
    (OutputError("x.parquet", "it is an input"), 2),
    (TypeError("unexpected keyword argument 'lamda'"), 2),
    (FileNotFoundError(errno.ENOENT, "No such file or directory", "x"), 2),
    (IsADirectoryError(errno.EISDIR, "Is a directory", "x"), 2),
    (PermissionError(errno.EACCES, "Permission denied", "x"), 2),
    (ModuleNotFoundError("No module named 'matplotlib'"), 2),
    (json.JSONDecodeError("Expecting value", "{", 1), 2),
    (TooManySkipped("every record (5) was skipped"), 1),
    (OSError(errno.ENOSPC, "No space left on device"), 1),
    (OSError(errno.EIO, "Input/output error"), 1),
    (KeyError("x"), 1),
    (RuntimeError("x"), 1),
])
def test_exit_status_rule(exc, status):
    from fastuq.cli import EXIT_FAILED, EXIT_USAGE, exit_status

    assert (EXIT_USAGE, EXIT_FAILED) == (USAGE, FAILED)
    assert exit_status(exc) == status


def _pyproject_version() -> str:
    with PYPROJECT.open("rb") as f:
        return tomllib.load(f)["project"]["version"]


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"fastuq {_pyproject_version()}\n"


def test_version_of_the_command():
    res = subprocess.run([sys.executable, "-m", "fastuq", "--version"], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"fastuq {_pyproject_version()}\n"
