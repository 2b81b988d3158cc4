"""Shared test helpers."""

import pytest

from gpuplan import catalog


@pytest.fixture(scope="session")
def llama70b():
    return catalog.model("llama-3.1-70b")


@pytest.fixture(scope="session")
def held_out_checks():
    """Every held-out serving row predicted once (its serve-sim runs take seconds); tests only read it."""
    from gpuplan.serve.validate_held_out import validate_held_out

    return tuple(validate_held_out())


@pytest.fixture
def held_out_once(monkeypatch, held_out_checks):
    """``validate serving-held-out`` answering from the session's one prediction of every row."""
    from gpuplan.serve import validate_held_out

    monkeypatch.setattr(validate_held_out, "validate_held_out", lambda *a, **k: list(held_out_checks))
