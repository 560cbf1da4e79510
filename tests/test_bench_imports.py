"""The bench scripts import what they use from fastuq: a rename in the package (a private
name made public, a module moved) must not leave a bench script that fails on its first
line when someone runs it (bench/bench_replay.py imported ``fastuq.replay._metric_stack``
after it became ``fastuq.decisions.outcomes.metric_stack``)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCRIPTS = sorted(BENCH.glob("*.py"))


def _fastuq_imports(path: Path) -> list[tuple[str, str | None, int]]:
    """``(module, name or None, line)`` of every ``import fastuq...`` / ``from fastuq...
    import name`` in the script, at any depth (the scripts import inside functions)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                node.module == "fastuq" or node.module.startswith("fastuq.")):
            out += [(node.module, a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names
                    if a.name == "fastuq" or a.name.startswith("fastuq.")]
    return out


def test_the_bench_scripts_are_found():
    assert len(SCRIPTS) >= 10 and BENCH.joinpath("bench_replay.py") in SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bench_script_imports_resolve(script):
    missing = []
    for module, name, line in _fastuq_imports(script):
        mod = importlib.import_module(module)
        if name is not None and name != "*" and not hasattr(mod, name):
            try:  # a submodule imported by name
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{script.name}:{line}: from {module} import {name}")
    assert missing == []
