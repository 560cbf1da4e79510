"""The suite's own set-up: tests marked ``slow`` are registered, left out of a plain
``pytest`` and run by CI (``.ci/run``) as a second step; the README says how to run them."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]


def _pytest_options() -> dict:
    with (CHECKOUT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["tool"]["pytest"]["ini_options"]


def test_slow_marker_is_registered_and_left_out_by_default():
    options = _pytest_options()
    names = [m.split(":", 1)[0].strip() for m in options.get("markers", [])]
    assert "slow" in names
    words = shlex.split(options["addopts"])
    last = max(k for k, w in enumerate(words) if w == "-m")  # the last -m wins, so a
    assert words[last + 1] == "not slow", words  # command line's  -m slow  overrides it


def test_ci_runs_the_readme_command_then_the_slow_tests():
    lines = [ln.strip() for ln in (CHECKOUT / ".ci" / "run").read_text().splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    first = [k for k, ln in enumerate(lines) if re.search(r"\bpytest -p no:cacheprovider"
                                                          r"(?! -m)", ln)]
    second = [k for k, ln in enumerate(lines) if "pytest -p no:cacheprovider -m slow" in ln]
    assert first and second and first[0] < second[0], lines
    # the second step runs even when the first fails, and a failure of either fails CI
    assert "set -e" not in lines[second[0]] and "|| status=1" in lines[second[0]]
    assert "|| status=1" in lines[first[0]]


def test_readme_says_how_to_run_the_slow_tests():
    readme = (CHECKOUT / "README.md").read_text(encoding="utf-8")
    assert "`pytest -m slow`" in readme
