"""The package reads as the pipeline: imports go one way between stages and never form a cycle.

Every import counts, function-level ones included (a lazy import is still a dependency). The table
says which stages each stage may use; a new arrow is a design change, made here on purpose.
"""

from __future__ import annotations

import ast
from pathlib import Path

import ragtrace_collector

PACKAGE = Path(ragtrace_collector.__file__).resolve().parent
ROOT = "ragtrace_collector"

# stage -> stages it may import (besides itself). The pipeline: receiver → processor → queue → scoring → exporter.
ALLOWED: dict[str, set[str]] = {
    "version": set(),
    "config": set(),
    "internal": {"config"},  # building blocks every stage shares: credentials, host checks, secrets, URLs, Redis
    "model": set(),
    "receiver": {"model", "config", "internal"},
    "queue": {"model", "config", "internal"},
    "processor": {"model", "config", "internal", "queue"},
    "scoring": {"model", "config", "internal", "queue", "version"},  # version: each score's provenance
    "telemetry": {"model", "config"},
    "exporter": {"model", "config", "internal", "queue", "scoring", "telemetry"},
    # the quality loop: human labels, judge-vs-human agreement, datasets (reads the results store); telemetry for
    # the feedback counters' bounded labels (the ingest metrics' own)
    "review": {"model", "config", "internal", "scoring", "telemetry"},
    "explorer": {"model", "config", "internal", "scoring", "review"},
    "examples": set(),
    "service": {
        "model",
        "config",
        "internal",
        "receiver",
        "processor",
        "queue",
        "scoring",
        "exporter",
        "telemetry",
        "explorer",
        "review",
    },
    "cli": {
        "model",
        "config",
        "internal",
        "receiver",
        "processor",
        "queue",
        "scoring",
        "exporter",
        "telemetry",
        "explorer",
        "review",
        "service",
        "examples",
        "version",
    },
    "__init__": {"version"},
    "__main__": {"cli"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every ragtrace_collector module ``path`` imports, at any depth of the file."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    return imports_in(path.read_text(encoding="utf-8"), package)


def imports_in(source: str, package: str) -> set[str]:
    """The ragtrace_collector modules ``source`` (a module of ``package``) imports, function-level ones too."""
    tree = ast.parse(source)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == ROOT)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            if base.split(".")[0] != ROOT:
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in MODULES else base)
    return {m for m in found if m in MODULES}


FILES = {module_name(p): p for p in PACKAGE.rglob("*.py")}
MODULES = set(FILES)
GRAPH = {name: imports_of(path) - {name} for name, path in FILES.items()}


def stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycles():
    cycles = find_cycles(GRAPH)
    assert not cycles, f"import cycles: {cycles}"


def test_stages_import_only_the_stages_upstream_of_them():
    wrong = sorted(
        f"{m} -> {dep}"
        for m, deps in GRAPH.items()
        for dep in deps
        if stage(dep) != stage(m) and stage(dep) not in ALLOWED[stage(m)]
    )
    assert not wrong, "imports against the stage order:\n" + "\n".join(wrong)


def test_every_stage_is_in_the_table():
    assert {stage(m) for m in MODULES} <= set(ALLOWED)


def test_the_checker_sees_function_level_imports_and_cycles_through_them():
    """A lazy import inside a function is a dependency too, so a cycle cannot hide behind one."""
    lazy = "def open_state():\n    from ragtrace_collector.processor.assembly import redis_state\n"
    found = imports_in(lazy, "ragtrace_collector.processor.assembly")
    assert found == {"ragtrace_collector.processor.assembly.redis_state"}
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c"]]


def test_the_sdk_never_imports_the_collector():
    sdk = Path(__import__("ragtrace").__file__).resolve().parent
    offenders = [p.name for p in sdk.rglob("*.py") if "ragtrace_collector" in p.read_text(encoding="utf-8")]
    assert not offenders
