"""The two wheels as a user gets them: built from a copy of the tree, installed into a fresh virtual
environment, and the demo run from an empty directory (so nothing in the repository can be imported
by accident). Also what the wheels hold: the SDK pulls in only OpenTelemetry and wrapt, neither wheel
installs a stray top-level package, and the collector ships the example corpus and the alert rules
(their content, not a symlink).

About two minutes: building both wheels, installing them with their dependencies, a 25 s demo.
"""

from __future__ import annotations

import email.parser
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "grafana" / "prometheus" / "rules" / "ragtrace.rules.yml"
SDK_DEPENDENCIES = {"opentelemetry-api", "opentelemetry-sdk", "opentelemetry-exporter-otlp", "wrapt"}

# Not copied: anything a previous build or run left behind (a stale build/ would leak into the wheel).
_ROOT_SKIP = {".git", ".venv", "data", "ragtrace-data", "test-output", ".benchmarks"}
_SKIP = ("build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", "*.sqlite*")


def _ignore(directory: str, names: list[str]) -> set[str]:
    skipped = set(shutil.ignore_patterns(*_SKIP)(directory, names))
    if Path(directory) == REPO:
        skipped |= _ROOT_SKIP & set(names)
    return skipped


def run(argv: list, *, timeout: float, cwd: Path | None = None, env: dict | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(map(str, argv))} exited {done.returncode}:\n{output[-6000:]}"
    return done.stdout


def user_env() -> dict[str, str]:
    """The environment of a user who just installed the wheels: none of the test run's settings."""
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "LITELLM_LOCAL_MODEL_COST_MAP")
    return {
        k: v for k, v in os.environ.items() if k not in drop and not k.startswith(("RAGTRACE_", "OTEL_", "PYTEST_"))
    }


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    """Both wheels, built from a clean copy of the tree: {"sdk": ..., "collector": ...}."""
    work = tmp_path_factory.mktemp("wheels")
    src = work / "src"
    shutil.copytree(REPO, src, symlinks=True, ignore=_ignore)
    out = work / "dist"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", out, src, src / "collector"], timeout=300)
    (sdk,) = out.glob("ragtrace-*.whl")
    (collector,) = out.glob("ragtrace_collector-*.whl")
    return {"sdk": sdk, "collector": collector}


@pytest.fixture(scope="module")
def venv(wheels, tmp_path_factory) -> Path:
    """A fresh virtual environment with both wheels (and their dependencies) installed."""
    path = tmp_path_factory.mktemp("venv") / "venv"
    run([sys.executable, "-m", "venv", path], timeout=120)
    run(
        [
            path / "bin" / "python",
            "-m",
            "pip",
            "install",
            "--find-links",
            wheels["sdk"].parent,
            wheels["sdk"],
            wheels["collector"],
        ],
        timeout=600,
        env=user_env(),
    )
    return path


def top_level(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return {name.split("/")[0] for name in zf.namelist() if not name.split("/")[0].endswith(".dist-info")}


def test_sdk_requires_only_opentelemetry_and_wrapt(wheels):
    with zipfile.ZipFile(wheels["sdk"]) as zf:
        (metadata,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        meta = email.parser.Parser().parsestr(zf.read(metadata).decode())
    requires = meta.get_all("Requires-Dist") or []
    names = {re.match(r"[A-Za-z0-9._-]+", r).group(0).lower().replace("_", "-") for r in requires}
    assert names == SDK_DEPENDENCIES, requires
    assert not [r for r in requires if "extra ==" in r], requires  # no optional extras either


def test_wheels_install_only_their_own_package(wheels):
    assert top_level(wheels["sdk"]) == {"ragtrace"}
    assert top_level(wheels["collector"]) == {"ragtrace_collector"}  # no collector/, examples/, tests/...


def test_collector_wheel_ships_the_corpus_and_the_rules(wheels):
    with zipfile.ZipFile(wheels["collector"]) as zf:
        names = set(zf.namelist())
        corpus = [n for n in names if re.fullmatch(r"ragtrace_collector/examples/rag_app/data/[^/]+\.jsonl", n)]
        assert {Path(n).name for n in corpus} >= {"corpus.jsonl", "questions.jsonl"}, sorted(names)
        for name in corpus:
            lines = zf.read(name).decode().splitlines()
            assert len(lines) > 5 and json.loads(lines[0]), name
        sample = zf.read("ragtrace_collector/examples/evaluate/sample.jsonl").decode().splitlines()
        assert len(sample) >= 10 and "user_input" in json.loads(sample[0])  # the README's evaluate examples
        rules = "ragtrace_collector/examples/prometheus/ragtrace.rules.yml"
        assert rules in names, sorted(names)
        info = zf.getinfo(rules)
        assert not stat.S_ISLNK(info.external_attr >> 16), "the rules file is stored as a symlink"
        content = zf.read(rules)
    assert content == RULES.read_bytes()
    assert yaml.safe_load(content)["groups"]
    # the records explorer's templates and stylesheet: no page fetches anything from elsewhere
    explorer = {n.removeprefix("ragtrace_collector/explorer/") for n in names if "/explorer/" in n}
    assert {"templates/records.html", "templates/record.html", "templates/session.html", "static/explorer.css"} <= (
        explorer
    ), sorted(explorer)
    # every alert's runbook, served at /runbooks/<alert> (the alerts' runbook_url): real files, not links
    runbooks = {Path(n).name for n in explorer if n.startswith("runbooks/")}
    shipped = {p.name for p in (REPO / "docs" / "runbooks").glob("*.md")}
    assert shipped and runbooks == shipped, sorted(shipped - runbooks)
    with zipfile.ZipFile(wheels["collector"]) as zf:
        for name in runbooks:
            info = zf.getinfo(f"ragtrace_collector/explorer/runbooks/{name}")
            assert not stat.S_ISLNK(info.external_attr >> 16) and info.file_size > 0, name


def test_the_installed_wheel_runs_the_cascade_and_reader_judges_not_their_fallback(wheels, venv, tmp_path):
    """The cross-encoder and the claim reader are package data: a wheel without them, or with a file its sha256
    does not match, would quietly fall back to the feature model. From an empty directory, the installed judge
    must load both: the default cascade, and the reader reading every claim the cascade finds supported."""
    with zipfile.ZipFile(wheels["collector"]) as zf:
        local = "ragtrace_collector/scoring/judges/local/"
        for name in ("reader.json", "cross_encoder.json"):
            params = json.loads(zf.read(local + name))
            model = zf.read(local + params["model_file"])
            assert hashlib.sha256(model).hexdigest() == params["sha256"] and len(model) == params["bytes"], name
    cwd = tmp_path / "empty"
    cwd.mkdir()
    probe = (
        "import asyncio, json\n"
        "from ragtrace_collector.scoring.judges.local import LocalJudge\n"
        "judge = LocalJudge(model='reader')\n"
        "judge.warm_up()\n"
        "ctx = ['The Eiffel Tower was completed in March 1889 and designed by the company of Gustave Eiffel.']\n"
        "claims = ['The tower was finished in 1889, to a design by Eiffel.', 'It was not completed in 1889.']\n"
        "verdicts = asyncio.run(judge.verify_claims(claims, ctx, 'When was the Eiffel Tower completed?'))\n"
        "print(json.dumps({'default': LocalJudge().model_name, 'model': judge.model_name,\n"
        "  'fallback': judge.fallback_reason, 'cascade': str(judge.cascade.encoder().model_path),\n"
        "  'file': str(judge.reader.encoder().model_path), 'stats': judge.reader.stats.as_dict(),\n"
        "  'verdicts': [v.verdict for v in verdicts]}))\n"
    )
    out = json.loads(run([venv / "bin" / "python", "-c", probe], timeout=120, cwd=cwd, env=user_env()).splitlines()[-1])
    assert out["default"] == "cascade" and out["model"] == "reader" and out["fallback"] is None, out
    for file in (out["file"], out["cascade"]):
        assert Path(file).resolve().is_relative_to(venv.resolve()), out
    assert out["stats"]["claims"] == 2 and out["verdicts"] == ["yes", "no"], out


def test_demo_from_the_installed_wheels_scores_records(venv, tmp_path):
    cwd = tmp_path / "empty"
    cwd.mkdir()
    env = user_env()
    bin_dir = venv / "bin"

    probe = "import ragtrace, ragtrace_collector; print(ragtrace.__file__); print(ragtrace_collector.__file__)"
    where = run([bin_dir / "python", "-c", probe], timeout=60, cwd=cwd, env=env)
    for line in where.splitlines():
        assert Path(line).resolve().is_relative_to(venv.resolve()), f"imported from outside the venv: {line}"

    data = tmp_path / "demo"
    out = run(
        [
            bin_dir / "ragtrace-collector",
            "demo",
            "--duration",
            "25",
            "--rate",
            "4",
            "--no-prometheus",
            "--data-dir",
            data,
        ],
        timeout=150,
        cwd=cwd,
        env={**env, "COLUMNS": "200"},
    )
    scored = [int(n) for n in re.findall(r"\bscored=(\d+)", out)]
    assert scored and scored[-1] > 0, out
    urls = re.findall(r"^([\w /]+): (http://\S+)", out, flags=re.M)
    assert urls and urls[0][0] == "records explorer" and urls[0][1].endswith("/explorer/"), out
    assert re.findall(r"\bfailed=(\d+)", out)[-1] == "0", out  # every request of the example app went through
    assert list(cwd.iterdir()) == [], "the demo wrote into the working directory"

    summary = run(
        [
            bin_dir / "ragtrace-collector",
            "results",
            "--summary",
            "--json",
            "--store",
            data / "collector" / "results.sqlite",
        ],
        timeout=60,
        cwd=cwd,
        env=env,
    )
    rows = {row["metric"]: row for row in (json.loads(line) for line in summary.splitlines() if line.strip())}
    assert rows.get("faithfulness", {}).get("scored", 0) > 0, summary
    assert all(row["error"] == 0 for row in rows.values()), summary
