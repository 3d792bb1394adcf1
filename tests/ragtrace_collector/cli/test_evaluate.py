"""``ragtrace-collector evaluate``: real CLI, real LLM judge through litellm to the scripted server."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from ragtrace_collector.cli import evaluate, main
from tests.support.scripted_openai import ScriptedOpenAI, judge_task


def answer(body: dict):
    prompt = body["messages"][1]["content"]
    task = judge_task(body)
    if task == "extract_claims":
        return {"claims": [{"claim": "Claim one.", "relevant": "yes"}, {"claim": "Claim two.", "relevant": "no"}]}
    if task == "verify_claims":
        return {"verdicts": [{"id": 1, "verdict": "yes"}, {"id": 2, "verdict": "no"}]}
    if task == "chunk_relevance":
        n = len(re.findall(r'<context id="\d+">', prompt))
        return {"verdicts": [{"id": i, "useful": i == 1} for i in range(1, n + 1)]}
    return {}


def row(i: int, **extra) -> str:
    data = {
        "id": f"r{i}",
        "user_input": f"Question {i}?",
        "retrieved_contexts": [f"Context {i}.", "Other."],
        "response": f"Answer {i}. More {i}.",
    }
    data.update(extra)
    return json.dumps(data)


@pytest.fixture
def server():
    with ScriptedOpenAI(responder=answer) as s:
        yield s


def run_cli(server, data: Path, out: Path, *extra: str) -> int:
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
            "--timeout",
            "20",
            "--max-retries",
            "0",
            "--no-progress",
            "--out",
            str(out),
            *extra,
        ]
    )


def read(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_bad_rows_get_an_error_line_and_the_run_goes_on(server, tmp_path, capsys):
    data = tmp_path / "in.jsonl"
    data.write_text(
        "\n".join(
            [
                row(1),
                "{not json",
                json.dumps({"id": "bad", "retrieved_contexts": 5}),
                json.dumps([1, 2]),
                row(2, reference="Answer 2."),
                "[" * 5000 + "]" * 5000,  # nested past the JSON parser's depth
                row(3).replace("Answer", "Answer \\ud800"),  # a lone surrogate: no Unicode text (the models refused it)
            ]
        )
        + "\n"
    )
    out = tmp_path / "out.jsonl"
    assert (
        run_cli(server, data, out, "--metrics", "faithfulness,hallucination,answer_relevancy,context_precision,bleu")
        == 0
    )
    lines = {e["id"]: e for e in read(out)}
    assert set(lines) == {"r1", "line-2", "bad", "line-4", "r2", "line-6", "r3"}
    assert "invalid row" in lines["r3"]["error"] and "surrogate" in lines["r3"]["error"]
    assert "invalid JSON" in lines["line-2"]["error"] and "invalid JSON" in lines["line-6"]["error"]
    assert "invalid row" in lines["bad"]["error"]
    assert "JSON object" in lines["line-4"]["error"]
    good = lines["r1"]
    assert good["scores"] == {
        "faithfulness": 0.5,
        "hallucination": 0.5,
        "answer_relevancy": 0.5,
        "context_precision": 1.0,
        "bleu": None,
    }
    assert good["results"]["bleu"]["status"] == "skipped" and "reference" in good["results"]["bleu"]["reason"]
    assert good["results"]["faithfulness"]["details"]["claims"][1]["verdict"] == "no"
    assert good["usage"]["calls"] == 3 and good["usage"]["prompt_tokens"] > 0
    assert lines["r2"]["scores"]["bleu"] is not None
    printed = capsys.readouterr().out
    assert "faithfulness" in printed and "0.5000" in printed and "unreadable: 5" in printed


def test_an_interrupted_run_resumes_without_redoing_rows(server, tmp_path):
    data = tmp_path / "in.jsonl"
    data.write_text("\n".join(row(i) for i in range(1, 6)) + "\n")
    out = tmp_path / "out.jsonl"
    three = ("--metrics", "faithfulness,answer_relevancy,context_precision")  # 3 judge calls a row
    assert run_cli(server, data, out, *three, "--limit", "2") == 0
    assert sorted(e["id"] for e in read(out)) == ["r1", "r2"]
    first_calls = len(server.chat_requests())
    # a torn last line, as left by a kill mid-write
    with out.open("a") as fh:
        fh.write('{"id": "r3", "scores": {"faith')
    assert run_cli(server, data, out, *three) == 0
    ids = [e["id"] for e in read(out)]
    assert sorted(ids) == ["r1", "r2", "r3", "r4", "r5"]  # each once, the torn line gone
    assert len(server.chat_requests()) - first_calls == 3 * 3
    assert run_cli(server, data, out, *three) == 0
    assert len(server.chat_requests()) - first_calls == 3 * 3  # nothing redone


def test_rows_that_failed_on_judge_availability_are_redone(server, tmp_path, capsys):
    data = tmp_path / "in.jsonl"
    data.write_text(row(1) + "\n")
    out = tmp_path / "out.jsonl"
    server.responder = lambda body: 503
    assert run_cli(server, data, out, "--metrics", "faithfulness") == 1  # nothing scored: CI must notice
    [entry] = read(out)
    assert entry["retry"] is True and entry["scores"]["faithfulness"] is None
    assert entry["results"]["faithfulness"]["retryable"] is True
    server.responder = answer
    assert run_cli(server, data, out, "--metrics", "faithfulness") == 0
    entries = read(out)
    assert len(entries) == 2 and entries[-1]["scores"]["faithfulness"] == 0.5
    assert "errors" in capsys.readouterr().out


def test_unknown_metric_and_missing_file_fail_fast(server, tmp_path, capsys):
    data = tmp_path / "in.jsonl"
    data.write_text(row(1) + "\n")
    assert run_cli(server, data, tmp_path / "o.jsonl", "--metrics", "faithfulness,wisdom") == 2
    assert "wisdom" in capsys.readouterr().err
    assert run_cli(server, tmp_path / "absent.jsonl", tmp_path / "o.jsonl") == 2
    broken = tmp_path / "dag.yaml"
    broken.write_text("root: [unclosed\n")
    capsys.readouterr()
    assert run_cli(server, data, tmp_path / "o.jsonl", "--metrics", "dag", "--dag", str(broken)) == 2
    assert "not valid YAML" in capsys.readouterr().err
    assert not server.requests


def test_legacy_ragas_column_names_are_accepted(server, tmp_path):
    data = tmp_path / "in.jsonl"
    data.write_text(
        json.dumps({"id": "old", "question": "Q?", "contexts": ["C."], "answer": "A. B.", "ground_truth": "A."}) + "\n"
    )
    out = tmp_path / "out.jsonl"
    assert run_cli(server, data, out, "--metrics", "faithfulness,levenshtein") == 0
    [entry] = read(out)
    assert entry["scores"]["faithfulness"] == 0.5 and entry["scores"]["levenshtein"] is not None


def test_a_rerun_scores_only_the_metrics_a_row_lacks(server, tmp_path, capsys):
    data = tmp_path / "in.jsonl"
    data.write_text(row(1) + "\n")
    out = tmp_path / "out.jsonl"
    assert run_cli(server, data, out, "--metrics", "faithfulness") == 0
    before = len(server.chat_requests())
    assert before == 2  # claims, verdicts
    assert run_cli(server, data, out, "--metrics", "faithfulness,context_precision") == 0
    assert len(server.chat_requests()) - before == 1  # only the chunk verdicts
    first, last = read(out)
    assert last["scores"] == {"faithfulness": 0.5, "context_precision": 1.0}
    assert last["results"]["faithfulness"] == first["results"]["faithfulness"]
    assert last["usage"]["calls"] == 3  # what the row cost over both runs
    assert "context_precision" in capsys.readouterr().out


def test_an_unreadable_row_fixed_in_the_input_is_scored_on_rerun(server, tmp_path):
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"id": "r1", "retrieved_contexts": 5}) + "\n" + "{broken\n")
    out = tmp_path / "out.jsonl"
    assert run_cli(server, data, out, "--metrics", "faithfulness") == 1  # every row unreadable
    assert [("error" in e) for e in read(out)] == [True, True]
    data.write_text(row(1) + "\n" + "{broken\n")
    assert run_cli(server, data, out, "--metrics", "faithfulness") == 0
    entries = read(out)
    assert len(entries) == 3  # the still-broken line is not written again
    assert entries[-1]["id"] == "r1" and entries[-1]["scores"] == {"faithfulness": 0.5}


# --- one configuration with serve: --config, environment, flags ---------------------------------------


def parse_evaluate(*argv: str):
    parser = argparse.ArgumentParser()
    evaluate.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_flags_are_overrides_of_the_judge_and_scoring_sections(tmp_path):
    key = tmp_path / "judge.key"
    key.write_text("  k\n")
    args = parse_evaluate(
        "in.jsonl",
        "--out",
        "o.jsonl",
        "--judge",
        "openai/x",
        "--judge-base-url",
        "http://j/v1",
        "--judge-api-key-file",
        str(key),
        "--embedding-model",
        "openai/emb",
        "--concurrency",
        "8",
        "--timeout",
        "12",
        "--max-retries",
        "1",
        "--answer-relevancy-variant",
        "questions",
        "--idk-supported",
        "--geval-criteria",
        "Concise?",
        "--geval-params",
        "response",
        "--dag",
        "tree.yaml",
        "--metrics",
        "faithfulness, geval",
    )
    assert evaluate.config_overrides(args) == {
        "judge": {
            "model": "openai/x",
            "base_url": "http://j/v1",
            "api_key": "k",
            "embedding_model": "openai/emb",
            "concurrency": 8,
            "timeout_seconds": 12.0,
            "max_retries": 1,
        },
        "scoring": {
            "metrics": ["faithfulness", "geval"],
            "concurrency": 8,
            "options": {
                "answer_relevancy_variant": "questions",
                "idk_counts_as_supported": True,
                "geval": {"criteria": "Concise?", "params": ["response"]},
                "dag": "tree.yaml",
            },
        },
    }
    assert evaluate.config_overrides(parse_evaluate("in.jsonl", "--out", "o.jsonl")) == {}  # the rest is config


def test_default_metrics_are_the_configs(server, tmp_path):
    from ragtrace_collector.config import CollectorConfig
    from ragtrace_collector.scoring.metrics import DEFAULT_METRICS

    data = tmp_path / "in.jsonl"
    data.write_text(row(1) + "\n")
    out = tmp_path / "out.jsonl"
    assert run_cli(server, data, out) == 0
    [entry] = read(out)
    assert list(entry["scores"]) == CollectorConfig().scoring.metrics == list(DEFAULT_METRICS)


def test_config_file_then_environment_then_flags(server, tmp_path, monkeypatch):
    config = tmp_path / "collector.yaml"
    config.write_text(
        "judge: {model: openai/from-file, base_url: http://127.0.0.1:9/v1, api_key: k, max_retries: 0}\n"
        "scoring:\n  metrics: [bleu]\n"
    )
    monkeypatch.setenv("RAGTRACE_JUDGE__BASE_URL", server.base_url)  # environment over the file
    monkeypatch.setenv("RAGTRACE_JUDGE", "openai/from-env")
    monkeypatch.setenv("RAGTRACE_SCORING__METRICS", "[faithfulness, bleu]")
    data = tmp_path / "in.jsonl"
    data.write_text(row(1, reference="Answer 1.") + "\n")
    out = tmp_path / "out.jsonl"
    argv = ["evaluate", str(data), "--config", str(config), "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    [entry] = read(out)
    assert entry["judge"] == "openai/from-env" and set(entry["scores"]) == {"faithfulness", "bleu"}
    assert entry["scores"]["faithfulness"] == 0.5  # the judge at the environment's base URL answered
    assert main([*argv, "--judge", "openai/from-flag", "--metrics", "faithfulness,context_precision"]) == 0
    last = read(out)[-1]
    assert last["judge"] == "openai/from-flag" and last["scores"]["context_precision"] == 1.0


def test_geval_from_the_config_file_reaches_the_judge(server, tmp_path):
    config = tmp_path / "collector.yaml"
    config.write_text(
        "scoring:\n  options:\n    geval:\n      name: conciseness\n      criteria: Is the answer concise\n"
        "      steps: [Read the answer.]\n"
    )
    server.responder = lambda body: {"score": 8, "reason": "short"} if judge_task(body) == "geval_score" else {}
    data = tmp_path / "in.jsonl"
    data.write_text(row(1) + "\n")
    out = tmp_path / "out.jsonl"
    assert run_cli(server, data, out, "--config", str(config), "--metrics", "geval") == 0
    [entry] = read(out)
    assert entry["scores"]["geval"] == pytest.approx(7 / 9)
    [request] = server.chat_requests()
    assert "Is the answer concise" in json.dumps(request.body)


def test_geval_without_criteria_is_a_configuration_error(server, tmp_path, capsys):
    data = tmp_path / "in.jsonl"
    data.write_text(row(1) + "\n")
    assert run_cli(server, data, tmp_path / "o.jsonl", "--metrics", "geval") == 2
    assert "scoring.options.geval" in capsys.readouterr().err
    assert run_cli(server, data, tmp_path / "o.jsonl", "--metrics", "geval", "--geval-params", "response") == 2
    assert "scoring.options.geval.criteria" in capsys.readouterr().err
    assert not server.requests


def test_exit_status_gates_ci_when_no_score_comes_out(server, tmp_path, capsys):
    """Every judge call failing is a failed run (exit 1) whose reasons reach stderr, not only the output file."""
    data = tmp_path / "in.jsonl"
    data.write_text(row(1) + "\n" + row(2) + "\n")
    out = tmp_path / "out.jsonl"
    server.responder = lambda body: 401
    assert run_cli(server, data, out, "--metrics", "faithfulness") == 1
    err = capsys.readouterr().err
    assert "no score came out" in err and "judge/metric errors" in err


def test_gates_fail_each_metric_on_its_own_side(server, tmp_path, capsys):
    """A regression gate: faithfulness (higher is better) fails under its floor, hallucination (lower is better)
    over its ceiling; a mean equal to the threshold passes; every failing metric gets its own line."""
    data = tmp_path / "in.jsonl"
    data.write_text(row(1) + "\n" + row(2) + "\n")  # every row: faithfulness 0.5, hallucination 0.5
    out = tmp_path / "out.jsonl"
    both = ("--metrics", "faithfulness,hallucination")
    assert (
        run_cli(server, data, out, *both, "--fail-under", "faithfulness=0.5", "--fail-over", "hallucination=0.5") == 0
    )
    err = capsys.readouterr().err
    assert "gate passed: faithfulness mean 0.5000 >= 0.5" in err and "gate passed: hallucination" in err
    assert "gate failed" not in err

    assert (
        run_cli(server, data, out, *both, "--fail-under", "faithfulness=0.6", "--fail-over", "hallucination=0.4") == 1
    )
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("gate failed:")]
    assert lines == [
        "gate failed: faithfulness mean 0.5000 < 0.6 over 2 scored rows (--fail-under faithfulness=0.6)",
        "gate failed: hallucination mean 0.5000 > 0.4 over 2 scored rows (--fail-over hallucination=0.4)",
    ], err

    # one failing gate among passing ones fails the run; pairs may share a flag or repeat it
    assert (
        run_cli(server, data, out, *both, "--fail-under", "faithfulness=0.4", "--fail-over", "hallucination=0.45") == 1
    )
    err = capsys.readouterr().err
    assert "gate passed: faithfulness" in err and "gate failed: hallucination" in err
    three = ("--metrics", "faithfulness,context_precision")
    assert run_cli(server, data, out, *three, "--fail-under", "faithfulness=0.5,context_precision=0.9") == 0
    assert (
        run_cli(server, data, out, *three, "--fail-under", "faithfulness=0.5", "--fail-under", "context_precision=1.01")
        == 1
    )
    assert "gate failed: context_precision mean 1.0000 < 1.01" in capsys.readouterr().err


def test_a_gate_on_the_wrong_side_or_an_unscored_metric_is_a_usage_error(server, tmp_path, capsys):
    """Gating hallucination from below would pass on a collapse: it is refused (exit 2) before any judge call."""
    data = tmp_path / "in.jsonl"
    data.write_text(row(1) + "\n")
    out = tmp_path / "out.jsonl"
    assert run_cli(server, data, out, "--metrics", "hallucination", "--fail-under", "hallucination=0.2") == 2
    assert "lower is better for hallucination, so gate it with --fail-over" in capsys.readouterr().err
    assert run_cli(server, data, out, "--metrics", "faithfulness", "--fail-over", "faithfulness=0.2") == 2
    assert "gate it with --fail-under" in capsys.readouterr().err
    assert run_cli(server, data, out, "--metrics", "faithfulness", "--fail-under", "answer_relevancy=0.7") == 2
    assert "answer_relevancy is not among the metrics scored" in capsys.readouterr().err
    assert run_cli(server, data, out, "--metrics", "faithfulness", "--fail-under", "faithfulnes=0.7") == 2
    assert "unknown metric 'faithfulnes'" in capsys.readouterr().err
    for bad in ("faithfulness", "faithfulness=high", "faithfulness=nan", "=0.5", "faithfulness=0.5,faithfulness=0.6"):
        with pytest.raises(SystemExit) as exc:
            run_cli(server, data, out, "--metrics", "faithfulness", "--fail-under", bad)
        assert exc.value.code == 2, bad
    assert not server.requests and not out.exists()


def test_a_gate_with_no_score_behind_it_fails(server, tmp_path, capsys):
    """Every judge call failing must not pass a gate: no mean is a failed gate, with the reason counts."""
    data = tmp_path / "in.jsonl"
    data.write_text(row(1) + "\n")
    server.responder = lambda body: 401
    out = tmp_path / "out.jsonl"
    assert run_cli(server, data, out, "--metrics", "faithfulness", "--fail-under", "faithfulness=0.1") == 1
    err = capsys.readouterr().err
    assert "gate failed: faithfulness no score to compare (0 skipped, 1 errors)" in err, err


def test_gate_pairs_parse_metric_threshold_lists():
    assert evaluate.gate_pairs("faithfulness=0.8, answer_relevancy=0.7,") == {
        "faithfulness": 0.8,
        "answer_relevancy": 0.7,
    }
    assert evaluate.Gate("faithfulness", 0.8, True).passes(0.8)
    assert not evaluate.Gate("faithfulness", 0.8, True).passes(0.79)
    assert evaluate.Gate("hallucination", 0.2, False).passes(0.2)
    assert not evaluate.Gate("hallucination", 0.2, False).passes(0.21)
    assert not evaluate.Gate("hallucination", 0.2, False).passes(None)
    with pytest.raises(argparse.ArgumentTypeError):
        evaluate.gate_pairs(" , ")
