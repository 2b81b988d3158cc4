"""Shared test helpers."""

import pytest

from gpuplan import catalog


@pytest.fixture(scope="session")
def llama70b():
    return catalog.model("llama-3.1-70b")
