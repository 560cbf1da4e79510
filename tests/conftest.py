"""Shared test settings.

- Hypothesis profiles sized for a 2-core CI machine (``FASTUQ_HYPOTHESIS=dev`` for fewer
  examples).
- The suite tests the *installed* fastuq: a wheel (``pip install ".[test]"``, as .ci/run does)
  or an editable install of this checkout (``pip install -e ".[test]"``). Before collecting
  anything, pytest stops with a usage error when ``import fastuq`` resolves to something else,
  e.g. the source tree in the working directory shadowing an installed wheel (``python -m
  pytest`` from the repository root puts the working directory first on ``sys.path``), or an
  editable install of another checkout.
- Subprocesses started by the tests (``python -c``, ``python -m fastuq ...``) get
  ``PYTHONSAFEPATH=1``, so they do not put their working directory first on ``sys.path``
  either, and import the same installed package as the test process.
"""

from __future__ import annotations

import json
import os
import sys
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=15, deadline=None)
settings.load_profile(os.environ.get("FASTUQ_HYPOTHESIS", "ci"))

os.environ["PYTHONSAFEPATH"] = "1"  # inherited by every subprocess the tests start
# Several test processes (pytest-xdist workers) may share one GPU: none may take most of its
# memory up front, as JAX does by default.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

# Test-only references (tests/_references.py, ...) import by name under --import-mode=importlib.
sys.path.insert(0, str(Path(__file__).resolve().parent))

#: The checkout these tests belong to (used only to tell an install of it apart from others;
#: no test reads package files through this path).
CHECKOUT = Path(__file__).resolve().parents[1]


def _editable_source() -> Path | None:
    """The source directory of an editable install of fastuq, or None for a regular one."""
    try:
        text = metadata.distribution("fastuq").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    if not text:
        return None
    info = json.loads(text)
    if not info.get("dir_info", {}).get("editable", False):
        return None
    url = urlparse(info.get("url", ""))
    return Path(unquote(url.path)).resolve() if url.scheme == "file" else None


def installed_package_problem() -> str | None:
    """Why ``import fastuq`` does not give the installed package these tests should run
    against (``None`` when it does)."""
    try:
        metadata.distribution("fastuq")
    except metadata.PackageNotFoundError:
        return 'fastuq is not installed: run  pip install ".[test]"  (or -e) first'
    import fastuq

    pkg = Path(fastuq.__file__).resolve().parent
    try:
        import fastuq.kernels
    except ImportError as exc:
        return (f"imported fastuq from {pkg}, where fastuq.kernels cannot be imported ({exc}): "
                "a source tree shadows the installed package; run the tests with the "
                "`pytest` command (not `python -m pytest` from the repository root)")
    kernels = Path(fastuq.kernels.__file__).resolve().parent
    source = _editable_source()
    if source is not None:  # editable install: this checkout's fastuq/ and kernels/
        want = (source / "fastuq", source / "kernels")
        if source != CHECKOUT:
            return (f"fastuq is an editable install of {source}, but these tests belong to "
                    f"{CHECKOUT}: install this checkout (pip install -e .) to test it")
    else:  # a wheel: fastuq/kernels inside the installed fastuq/, where pip put it
        installed = metadata.distribution("fastuq").locate_file("fastuq/__init__.py")
        want = (Path(installed).resolve().parent, Path(installed).resolve().parent / "kernels")
        if pkg == CHECKOUT / "fastuq":
            return (f"imported fastuq from the source tree {pkg}, not the installed wheel: "
                    "run the tests with the `pytest` command (not `python -m pytest` from the "
                    "repository root)")
    if (pkg, kernels) != want:
        return (f"imported fastuq from {pkg} and fastuq.kernels from {kernels}, expected "
                f"{want[0]} and {want[1]} (the installed package)")
    return None


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """How many processes ``-n auto`` (pyproject.toml's addopts) runs the tests in: one per
    CPU this process may use (affinity and cgroup quota, as the engine counts them), at most
    4; none (in this process) on one CPU. Test files stay whole on one worker
    (``--dist loadfile``), so a module's fixtures are built once."""
    if installed_package_problem():
        return 0  # no workers: pytest_configure stops the run with the reason
    from fastuq.engine.host import available_cpus

    usable = int(available_cpus())
    return 0 if usable <= 1 else min(usable, 4)


def pytest_configure(config: pytest.Config) -> None:
    problem = installed_package_problem()
    if problem:
        raise pytest.UsageError(f"fastuq tests: {problem}")
