"""Every name ARCHITECTURE.md gives is real: its paths exist, its modules import, its classes and functions are
defined, its ``Class.member`` pairs are members of that class.

The document is the map a new contributor reads first; sections were once updated as things moved and a test was
missing, so it named contract tests and entry points that no longer existed. Each code-looking name in backticks is
checked against the tree; words that are not code (commands, variables, URLs, prose) are told apart by shape.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "ARCHITECTURE.md"
PACKAGES = ("ragtrace_collector", "ragtrace")
# Backticked words that are not names in this tree: Python builtins, shell commands and placeholders.
NOT_CODE = {"None", "hasattr", "isinstance", "len", "__", "RAGTRACE_*", "RAGTRACE_<PATH>", "judge:"}
# Names of the projects the document compares with: the OpenTelemetry Collector (Go) and opentelemetry-python.
FOREIGN = {"component.Component", "Start", "Shutdown", "SpanExporter.shutdown"}


def _files() -> list[Path]:
    """The repository's files as git sees them (tracked, or new and not ignored): never a venv or a build."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [REPO / name for name in listed.split("\0") if name and (REPO / name).exists()]


@cache
def _tree_paths() -> set[str]:
    paths = {path.relative_to(REPO).as_posix() for path in _files()}
    return paths | {parent.as_posix() for p in paths for parent in Path(p).parents if parent != Path(".")}


@cache
def _definitions() -> dict[str, set[str]]:
    """Every name defined in the repository's Python code (classes, functions, assignments, annotated fields,
    attributes set on ``self``), and for each class the names defined in its body or on ``self`` in its methods."""
    found: dict[str, set[str]] = {"": set()}
    for path in _files():
        if path.suffix != ".py" or not path.is_file() or path == Path(__file__).resolve():
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                found[""].add(node.name)
                if isinstance(node, ast.ClassDef):
                    members = found.setdefault(node.name, set())
                    for inner in ast.walk(node):
                        if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                            members.add(inner.name)
                        elif isinstance(inner, ast.AnnAssign) and isinstance(inner.target, ast.Name):
                            members.add(inner.target.id)
                        elif isinstance(inner, ast.Assign):
                            members.update(t.id for t in inner.targets if isinstance(t, ast.Name))
                        elif (
                            isinstance(inner, ast.Attribute)
                            and isinstance(inner.value, ast.Name)
                            and inner.value.id == "self"
                        ):
                            members.add(inner.attr)
            elif isinstance(node, ast.Assign):
                found[""].update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                found[""].add(node.target.id)
            elif isinstance(node, ast.arg):
                found[""].add(node.arg)
            elif isinstance(node, ast.Attribute):
                found[""].add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"\w+", node.value):
                found[""].add(node.value)  # CLI verbs, option keys
    return found


def _path_exists(token: str) -> bool:
    token = token.split(" ")[0].split("<")[0].rstrip("/")  # a placeholder (<setup>) stands for any name
    if token.startswith("../shared"):
        return True  # beside the repository, not in it (CI has it; the doc says so)
    return any(p == token or p.endswith("/" + token) for p in _tree_paths())


def _dotted_exists(token: str) -> bool:
    parts = token.split(".")
    if parts[-1] in {"py", "toml", "md", "yml", "yaml", "json", "jsonl"}:
        return _path_exists(token)
    for package in PACKAGES:
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join((package, *parts[:cut])))
            except ImportError:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                continue
            return True
    try:  # a top-level module's own (ragtrace.feedback, typing.Protocol)
        obj = importlib.import_module(parts[0])
        for attr in parts[1:]:
            obj = getattr(obj, attr)
        return True
    except (ImportError, AttributeError):
        pass
    if token.startswith("ragtrace."):  # the SDK's own names, e.g. ragtrace.feedback
        return _dotted_exists(token.removeprefix("ragtrace."))
    if len(parts) == 2 and parts[0] in _definitions():  # Class.member
        return parts[1] in _definitions()[parts[0]]
    return bool(re.fullmatch(r"[a-z_]+(\.[a-z_]+)+", token))  # an attribute path in config or a span convention


def _code_tokens() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    return sorted({t for t in re.findall(r"`([^`\n]+)`", text) if t not in NOT_CODE | FOREIGN})


def _check(token: str) -> bool:
    if token.startswith("/") or (" " in token and not re.match(r"[\w.]+\(", token)):
        return True  # URL paths, commands and prose in backticks
    head = re.match(r"[\w./<>*-]+", token)
    if head is None:
        return True
    name = head.group(0)
    if "/" in name:
        return _path_exists(name)
    if "." in name:
        return _dotted_exists(name)
    if re.fullmatch(r"\w+", name):
        return name in _definitions()[""] or name in _definitions()
    return True


def test_every_name_in_architecture_is_real() -> None:
    tokens = _code_tokens()
    assert len(tokens) > 200, "ARCHITECTURE.md lost its names, or this test stopped finding them"
    missing = [t for t in tokens if not _check(t)]
    assert not missing, f"ARCHITECTURE.md names what the tree does not have: {missing}"


def test_the_check_finds_a_name_that_is_not_there() -> None:
    """The check itself must fail on names that went away (a renamed module, a removed class or method)."""
    for gone in (
        "processor/assembly/assembler.py",
        "processor.assembly.assembler.Assembler",
        "_StopSteps",
        "Pipeline.no_such_member",
        "scoring.judges.nothing.Judge",
    ):
        assert not _check(gone), gone


def test_the_stage_table_says_what_the_layering_test_allows() -> None:
    """The "may import" column is the layering test's ``ALLOWED`` table, word for word as sets."""
    from tests.ragtrace_collector.test_layering import ALLOWED

    rows = re.findall(r"^\| (\w+) \| `[\w/.]+` \| .* \| ([^|]+) \|$", DOC.read_text(encoding="utf-8"), re.M)
    said = {stage: {w.strip() for w in deps.split(",")} - {"—", ""} for stage, deps in rows}
    assert len(said) >= 12, said
    for stage, deps in said.items():
        if any(d.startswith("every stage above") for d in deps):
            continue  # the composition root and the CLI: their rows say so in words
        assert deps == ALLOWED[stage], (stage, deps, ALLOWED[stage])
