"""The explorer's tests share one real collector fed by the example app (tests/support/explorer_stack.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.explorer_stack import Fed, fed_collector


@pytest.fixture(scope="package")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fed]:
    with fed_collector(tmp_path_factory.mktemp("explorer")) as running:
        yield running
