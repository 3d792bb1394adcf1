"""Shared test setup: keep litellm offline, locate ../shared, give tests free loopback ports."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.paths import SHARED

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@pytest.fixture
def shared_dir() -> Path:
    """``../shared`` beside the repo; tests that need it skip cleanly where it is absent."""
    if not SHARED.is_dir():
        pytest.skip(f"shared data not found at {SHARED}")
    return SHARED
