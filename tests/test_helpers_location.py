"""Shared test helpers live in tests/support/: a test module never imports from a conftest file.

conftest files are pytest's to load (fixtures, hooks); importing one by module path runs it twice under
different names and hides where a helper lives.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _conftest_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] == "conftest":
            found.append(f"{path.relative_to(TESTS.parent)}:{node.lineno} from {node.module}")
        elif isinstance(node, ast.Import):
            found += [
                f"{path.relative_to(TESTS.parent)}:{node.lineno} import {a.name}"
                for a in node.names
                if a.name.split(".")[-1] == "conftest"
            ]
    return found


def test_no_test_imports_a_conftest() -> None:
    offenders = [hit for path in sorted(TESTS.rglob("*.py")) for hit in _conftest_imports(path)]
    assert offenders == [], "move these helpers to tests/support/:\n" + "\n".join(offenders)


def test_the_check_sees_both_import_forms() -> None:
    probe = TESTS / "_probe_conftest_import.py"
    try:
        probe.write_text("from tests.x.conftest import y\nimport tests.conftest\n")
        assert len(_conftest_imports(probe)) == 2
    finally:
        probe.unlink()
