"""A real receiver stack (ingestor → assembler) on loopback for the receiver tests."""

from __future__ import annotations

import pytest

from tests.support.receiver_stack import Stack


@pytest.fixture
def make_stack():
    return Stack
