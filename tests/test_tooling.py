"""The linters the project holds itself to run as part of the suite, so CI enforces them.

Each check skips (with the reason) only when its tool is not installed; `pip install -e '.[test]'`
installs both.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATHS = ["src", "tests", "benchmarks", "examples"]


def _run(module: str, *args: str) -> subprocess.CompletedProcess:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[test]')")
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_finds_nothing_to_lint():
    r = _run("ruff", "check", "--no-cache", *PATHS)
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff_format_check_passes():
    r = _run("ruff", "format", "--check", "--no-cache", *PATHS)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow
def test_mypy_passes_on_the_package():
    r = _run("mypy")  # files and settings from pyproject.toml
    assert r.returncode == 0, r.stdout + r.stderr
