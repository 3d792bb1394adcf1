"""``ragtrace-collector rescore``: stored records through a real judge again — the LLM judge over loopback HTTP
(the scripted OpenAI-compatible server, through litellm) and the embedded one — new scores kept beside the old."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from ragtrace_collector.cli import main
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.scoring.engine import evaluate_record
from ragtrace_collector.scoring.judges import make_judge
from ragtrace_collector.scoring.results_store import ResultsStore
from tests.support.scripted_openai import ScriptedOpenAI, faithfulness_reply


def record(i: int, service: str = "shop") -> RagRecord:
    return RagRecord(
        trace_id=f"{i + 1:032x}",
        service=service,
        pipeline="qa",
        user_input=f"Where is landmark {i}?",
        response=f"Landmark {i} is in Paris. It opened in 1889.",
        retrieved_contexts=[{"content": f"Landmark {i} is a tower in Paris, France."}],
        start_time_unix_nano=int((1_700_000_000 + i) * 1e9),
    )


@pytest.fixture
def server():
    # the first claim of each answer is supported, the second not: faithfulness 0.5, hallucination 0.5
    with ScriptedOpenAI(responder=lambda body: faithfulness_reply(body, lambda i: i == 0)) as s:
        yield s


@pytest.fixture
def store_path(tmp_path) -> Path:
    """A store the embedded judge filled with faithfulness scores of three records (two of service shop)."""
    path = tmp_path / "results.sqlite"
    store = ResultsStore(path)
    judge = make_judge("local", model="features")
    for i, service in enumerate(("shop", "shop", "bank")):
        r = record(i, service)
        store.add(r, asyncio.run(evaluate_record(r, ["faithfulness"], judge)), judge.name)
    store.close()
    return path


def rescore(server, store_path: Path, *extra: str) -> int:
    key = store_path.with_name("judge.key")
    key.write_text("k\n")
    return main(
        [
            "rescore",
            "--store",
            str(store_path),
            "--judge",
            "openai/scripted",
            "--judge-base-url",
            server.base_url,
            "--judge-api-key-file",
            str(key),
            "--max-retries",
            "0",
            "--json",
            *extra,
        ]
    )


def summary(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_an_llm_judge_rescores_beside_the_first_scores_and_adds_what_was_missing(server, store_path, capsys):
    before = {k: [r.score for r in ResultsStore(store_path).get(k)] for k in (record(i).key for i in range(3))}
    assert rescore(server, store_path, "--metrics", "faithfulness,hallucination") == 0
    out = summary(capsys)
    assert out == {
        "judge": "openai/scripted",
        "records": 3,
        "unreadable": 0,
        "added": 3,  # hallucination: none of the records had it
        "rescored": 3,  # faithfulness: kept beside the embedded judge's
        "unchanged": 0,
        "errors": 0,
        "waiting": 0,
    }
    store = ResultsStore(store_path)
    for i in range(3):
        key = record(i).key
        results = {r.metric: r for r in store.get(key)}
        assert results["faithfulness"].score == before[key][0] and results["faithfulness"].judge == "local"
        added = results["hallucination"]
        assert added.score == 0.5 and added.judge == "openai/scripted"
        assert added.provenance["judge_model"] == "openai/scripted" and added.provenance["metric"] == "hallucination"
        (again,) = store.rescored(key)
        assert again.metric == "faithfulness" and again.score == 0.5 and again.judge == "openai/scripted"
        assert again.provenance["id"] != results["faithfulness"].provenance["id"]
    judged = store.judged_scores([record(0).trace_id], "faithfulness")
    assert {s.judge for s in judged} == {"local", "openai/scripted"}
    calls = len(server.chat_requests())
    assert calls > 0

    # the same judge again: nothing to do, and the judge is not asked
    assert rescore(server, store_path, "--metrics", "faithfulness,hallucination") == 0
    assert summary(capsys) | {"judge": None} == {
        "judge": None,
        "records": 3,
        "unreadable": 0,
        "added": 0,
        "rescored": 0,
        "unchanged": 6,
        "errors": 0,
        "waiting": 0,
    }
    assert len(server.chat_requests()) == calls


def test_since_and_service_choose_the_records(server, store_path, capsys):
    assert rescore(server, store_path, "--metrics", "faithfulness", "--service", "shop", "--since", "1700000001") == 0
    out = summary(capsys)
    assert (out["records"], out["rescored"]) == (1, 1)
    store = ResultsStore(store_path)
    assert [len(store.rescored(record(i).key)) for i in range(3)] == [0, 1, 0]


def test_a_judge_outage_keeps_nothing_and_fails(store_path, capsys):
    with ScriptedOpenAI(responder=lambda body: 503) as down:
        assert rescore(down, store_path, "--metrics", "faithfulness", "--timeout", "5") == 1
    out = summary(capsys)
    assert out["waiting"] == 3 and out["rescored"] == 0
    assert all(ResultsStore(store_path).rescored(record(i).key) == [] for i in range(3))


def test_the_embedded_judge_rescores_scores_from_before_provenance(tmp_path, capsys):
    path = tmp_path / "results.sqlite"
    store = ResultsStore(path)
    store.add(record(0), [MetricResult("faithfulness", "scored", 0.25)], "openai/old")  # a row from before v4
    store.close()
    assert main(["rescore", "--store", str(path), "--judge", "local", "--metrics", "faithfulness", "--json"]) == 0
    out = summary(capsys)
    assert (out["judge"], out["records"], out["rescored"], out["added"]) == ("local", 1, 1, 0)
    store = ResultsStore(path)
    (again,) = store.rescored(record(0).key)
    assert again.status == "scored" and again.judge == "local"
    assert again.provenance["judge_model"].startswith("local/") and again.provenance["metric_version"] == "1"
    assert [r.score for r in store.get(record(0).key)] == [0.25]


def test_usage_errors(tmp_path, capsys):
    assert main(["rescore", "--store", str(tmp_path / "none.sqlite"), "--judge", "local"]) == 1
    assert "no results store" in capsys.readouterr().err
    assert main(["rescore", "--store", str(tmp_path / "x.sqlite"), "--metrics", "nope"]) == 2
    assert "unknown metric" in capsys.readouterr().err
    assert main(["rescore", "--since", "yesterday-ish"]) == 2
