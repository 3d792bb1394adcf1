"""``ragtrace-collector dataset export``: stored records with their reviews and feedback as Ragas rows, read back by
``evaluate``, which measures the judge against the reviewers' labels (balanced accuracy, AUROC, kappa, gates)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ragtrace_collector.cli import main
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.review.dataset import DatasetFilter, dataset_rows, hallucinated
from ragtrace_collector.review.labels import ClaimVerdict, Feedback, LabelStore, Review
from ragtrace_collector.scoring.results_store import ResultsStore
from tests.support.paths import SHARED
from tests.support.scripted_openai import ScriptedOpenAI, judge_task


def record(i: int, response: str = "It is in Paris.", service: str = "shop") -> RagRecord:
    return RagRecord(
        trace_id=f"{i + 1:032x}",
        service=service,
        user_input=f"Where is landmark {i}?",
        response=response,
        retrieved_contexts=[{"content": f"Landmark {i} is in Paris.", "id": "d1"}, {"content": "Other text."}],
        start_time_unix_nano=int((1_700_000_000 + i) * 1e9),
    )


@pytest.fixture
def filled(tmp_path) -> Path:
    """Four records: 0 reviewed unfaithful with a reference and bad feedback, 1 reviewed faithful, 2 split
    reviewers and good feedback, 3 of another service, not reviewed."""
    path = tmp_path / "results.sqlite"
    store = ResultsStore(path)
    for i, score in enumerate((0.5, 1.0, 0.75, 0.25)):
        store.add(
            record(i, service="bank" if i == 3 else "shop"), [MetricResult("faithfulness", "scored", score)], "local"
        )
    labels = LabelStore(path)
    t = [record(i).trace_id for i in range(4)]
    labels.add_review(Review(t[0], "faithfulness", "ann", "unfaithful", reference="It is in Lyon."))
    labels.add_review(Review(t[1], "faithfulness", "ann", claims=(ClaimVerdict("It is in Paris.", "supported"),)))
    labels.add_review(Review(t[2], "faithfulness", "ann", "faithful"))
    labels.add_review(Review(t[2], "faithfulness", "bob", "unfaithful"))
    labels.add_feedback([Feedback(t[0], 0.0), Feedback(t[0], 0.5, comment="meh"), Feedback(t[2], 1.0)])
    labels.close()
    store.close()
    return path


def export(path: Path, out: Path, *extra: str) -> list[dict]:
    assert main(["dataset", "export", "--store", str(path), "--out", str(out), *extra]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_rows_carry_the_record_its_labels_feedback_and_scores(filled, tmp_path):
    rows = export(filled, tmp_path / "all.jsonl")
    assert [r["id"] for r in rows] == [record(i).trace_id for i in range(4)]
    first = rows[0]
    assert first["user_input"] == "Where is landmark 0?" and first["response"] == "It is in Paris."
    assert first["retrieved_contexts"] == ["Landmark 0 is in Paris.", "Other text."]
    assert first["reference"] == "It is in Lyon." and first["hallucinated"] is True
    assert [v["reviewer"] for v in first["human_verdicts"]] == ["ann"] and first["human_verdicts"][0]["unfaithful"]
    assert first["feedback"] == 0.25 and [f["comment"] for f in first["feedback_items"]] == [None, "meh"]
    assert first["scores"] == {"faithfulness": 0.5} and first["judge"] == "local"
    assert rows[1]["hallucinated"] is False and "reference" not in rows[1]  # claims all supported
    assert "hallucinated" not in rows[2] and len(rows[2]["human_verdicts"]) == 2  # one says each: no label
    assert "hallucinated" not in rows[3] and rows[3]["human_verdicts"] == [] and rows[3]["feedback"] is None
    assert not (tmp_path / "all.jsonl.tmp").exists()


def test_filters(filled, tmp_path):
    def ids(*extra: str) -> list[int]:
        rows = export(filled, tmp_path / "f.jsonl", *extra)
        return [int(r["trace_id"], 16) - 1 for r in rows]

    assert ids("--reviewed") == [0, 1, 2]
    assert ids("--feedback", "below=0.5") == [0]
    assert ids("--metric", "faithfulness", "--below", "0.8") == [0, 2, 3]
    assert ids("--service", "shop", "--metric", "faithfulness", "--below", "0.8") == [0, 2]
    assert ids("--since", "1700000002") == [2, 3]
    assert ids("--reviewed", "--metric", "faithfulness", "--below", "0.6") == [0]


def test_usage_errors(filled, tmp_path, capsys):
    out = str(tmp_path / "x.jsonl")
    assert main(["dataset", "export", "--store", str(filled), "--out", out, "--metric", "faithfulness"]) == 2
    with pytest.raises(SystemExit):
        main(["dataset", "export", "--store", str(filled), "--out", out, "--feedback", "under=3"])
    assert main(["dataset", "export", "--store", str(tmp_path / "none.sqlite"), "--out", out]) == 1
    assert "no results store" in capsys.readouterr().err


def test_a_store_of_thousands_is_exported_page_by_page(tmp_path):
    path = tmp_path / "big.sqlite"
    store = ResultsStore(path)
    for i in range(1200):
        store.add(record(i), [MetricResult("faithfulness", "scored", (i % 10) / 10)], "local")
    labels = LabelStore(path)
    labels.add_review(Review(record(1100).trace_id, "faithfulness", "ann", "unfaithful"))
    rows = dataset_rows(store, labels, DatasetFilter(metric_below=("faithfulness", 0.1)))
    first = next(rows)  # a generator: rows come before the whole store is read
    assert first["trace_id"] == record(0).trace_id
    assert 1 + sum(1 for _ in rows) == 120
    (reviewed,) = list(dataset_rows(store, labels, DatasetFilter(reviewed=True)))
    assert reviewed["hallucinated"] is True and reviewed["trace_id"] == record(1100).trace_id


def test_the_majority_label():
    t = "a" * 32
    un, ok = Review(t, "faithfulness", "a", "unfaithful"), Review(t, "faithfulness", "b", "faithful")
    assert hallucinated([un, un, ok]) is True and hallucinated([un, ok]) is None and hallucinated([]) is None
    assert hallucinated([Review(t, "answer_relevancy", "a", "unfaithful")]) is None  # not a faithfulness label


# --- evaluate measures the judge on labelled rows --------------------------------------------------------------


def answer(body: dict):
    """A scripted judge: each sentence is a claim, supported unless it mentions Mars."""
    prompt = body["messages"][1]["content"]
    task = judge_task(body)
    if task == "extract_claims":
        response = re.search(r"<response>\n(.*?)\n</response>", prompt, re.S).group(1)
        return {"claims": [{"claim": s.strip() + ".", "relevant": "yes"} for s in response.split(".") if s.strip()]}
    if task == "verify_claims":
        claims = re.findall(r'<claim id="\d+">\n(.*?)\n</claim>', prompt, re.S)
        return {"verdicts": [{"id": i + 1, "verdict": "no" if "Mars" in c else "yes"} for i, c in enumerate(claims)]}
    return {}


def evaluate(server, data: Path, out: Path, *extra: str) -> int:
    key = out.with_name("judge.key")
    key.write_text("k\n")
    return main(
        [
            "evaluate",
            str(data),
            "--judge",
            "openai/scripted",
            "--judge-base-url",
            server.base_url,
            "--judge-api-key-file",
            str(key),
            "--max-retries",
            "0",
            "--no-progress",
            "--metrics",
            "faithfulness",
            "--out",
            str(out),
            *extra,
        ]
    )


@pytest.fixture
def labelled(tmp_path) -> Path:
    """An exported dataset: two faithful, two hallucinated the judge catches, one hallucinated it misses, one
    without a label."""
    path = tmp_path / "results.sqlite"
    store = ResultsStore(path)
    labels = LabelStore(path)
    cases = [
        ("It is in Paris.", "faithful"),
        ("It is in Paris. It is old.", "faithful"),
        ("It is in Paris. It is on Mars.", "unfaithful"),
        ("It is on Mars.", "unfaithful"),
        ("It is in Paris.", "unfaithful"),
        ("It is in Paris.", None),
    ]
    for i, (response, verdict) in enumerate(cases):
        store.add(record(i, response), [MetricResult("faithfulness", "scored", 1.0)], "local")
        if verdict is not None:
            labels.add_review(Review(record(i).trace_id, "faithfulness", "ann", verdict))
    labels.close()
    store.close()
    data = tmp_path / "dataset.jsonl"
    export(path, data)
    return data


def test_evaluate_measures_the_judge_against_the_labels_and_gates_on_it(labelled, tmp_path, capsys):
    with ScriptedOpenAI(responder=answer) as server:
        report = tmp_path / "report.json"
        out = tmp_path / "scores.jsonl"
        assert evaluate(server, labelled, out, "--summary-json", str(report)) == 0
        printed = capsys.readouterr().out
        assert "agreement with the rows' hallucinated labels" in printed and "faithfulness < 1" in printed
        (agreement,) = json.loads(report.read_text())["agreement"]
        # verdicts (label, faithfulness < 1): 2 × (F, F), 2 × (T, T), (T, F)
        assert agreement["metric"] == "faithfulness" and agreement["labelled"] == 5 and agreement["hallucinated"] == 3
        assert agreement["balanced_accuracy"] == pytest.approx((2 / 3 + 1) / 2)
        assert agreement["kappa"] == pytest.approx((0.8 - 0.48) / 0.52)
        assert agreement["auroc"] == pytest.approx(5 / 6)  # the missed one ties with the faithful ones
        assert json.loads(report.read_text())["summary"][0]["count"] == 6

        gate = ["--fail-under", "faithfulness.balanced_accuracy=0.8,faithfulness.auroc=0.8"]
        assert evaluate(server, labelled, out, *gate) == 0
        assert "gate passed" in capsys.readouterr().err
        assert evaluate(server, labelled, out, "--fail-under", "faithfulness.kappa=0.7") == 1
        assert "gate failed: faithfulness.kappa 0.6154 < 0.7 over 5 labelled rows" in capsys.readouterr().err
        # the mean gates still work beside them
        assert evaluate(server, labelled, out, "--fail-under", "faithfulness=0.7,faithfulness.auroc=0.5") == 0
        # a looser rule: only below 0.5 is hallucinated — "It is on Mars." (0.0) is, "... Paris. ... Mars." (0.5) not
        assert (
            evaluate(server, labelled, out, "--label-threshold", "faithfulness=0.5", "--summary-json", str(report)) == 0
        )
        (loose,) = json.loads(report.read_text())["agreement"]
        assert loose["balanced_accuracy"] == pytest.approx((1 / 3 + 1) / 2) and loose["auroc"] == pytest.approx(5 / 6)


def test_agreement_gates_are_checked_up_front(labelled, tmp_path, capsys):
    with ScriptedOpenAI(responder=answer) as server:
        out = tmp_path / "scores.jsonl"
        assert evaluate(server, labelled, out, "--fail-over", "faithfulness.kappa=0.5") == 2
        assert "gate it with --fail-under" in capsys.readouterr().err
        assert evaluate(server, labelled, out, "--fail-under", "faithfulness.f1=0.5") == 2
        assert evaluate(server, labelled, out, "--fail-under", "hallucination.auroc=0.5") == 2
        assert not out.exists()  # nothing was scored


def test_a_gate_on_rows_without_labels_fails(tmp_path, capsys):
    data = tmp_path / "plain.jsonl"
    data.write_text(json.dumps({"id": "a", "user_input": "Q?", "retrieved_contexts": ["C."], "response": "C."}) + "\n")
    with ScriptedOpenAI(responder=answer) as server:
        assert evaluate(server, data, tmp_path / "o.jsonl", "--fail-under", "faithfulness.auroc=0.5") == 1
    assert "not measurable (0 labelled scores" in capsys.readouterr().err


@pytest.mark.skipif(not (SHARED / "data" / "halueval-qa-dev.jsonl").is_file(), reason="../shared/data not present")
def test_the_local_judge_on_halueval_rows(tmp_path, capsys):
    rows = []
    with (SHARED / "data" / "halueval-qa-dev.jsonl").open() as fh:
        for line in fh:
            rows.append(line)
            if len(rows) == 40:
                break
    data = tmp_path / "halueval.jsonl"
    data.write_text("".join(rows))
    report = tmp_path / "report.json"
    status = main(
        [
            "evaluate",
            str(data),
            "--judge",
            "local",
            "--metrics",
            "faithfulness",
            "--no-progress",
            "--out",
            str(tmp_path / "o.jsonl"),
            "--summary-json",
            str(report),
            "--fail-under",
            "faithfulness.auroc=0.55",
        ]
    )
    (agreement,) = json.loads(report.read_text())["agreement"]
    assert agreement["labelled"] == 40 and 0 < agreement["hallucinated"] < 40
    assert status == 0, agreement  # the embedded judge tells HaluEval's hallucinated answers apart
