"""The explorer's JSON API over HTTP, against a real collector fed by the example app (see conftest)."""

from __future__ import annotations

import time

import httpx

from tests.support.explorer_stack import METRICS, PAGE_SIZE, TOKEN, TURNS, Fed


def records(fed: Fed, **params: object) -> dict:
    response = fed.api("/api/v1/records", **params)
    assert response.status_code == 200, response.text
    return response.json()


def names(fed: Fed, body: dict) -> list[str]:
    by_trace = {v: k for k, v in fed.traces.items()}
    return [by_trace[r["trace_id"]] for r in body["records"]]


def test_the_api_needs_the_token_and_metrics_does_not(fed: Fed):
    bare = httpx.get(fed.base + "/api/v1/records", timeout=10)
    assert bare.status_code == 401 and bare.headers["WWW-Authenticate"].startswith("Bearer")
    assert "error" in bare.json()
    wrong = httpx.get(fed.base + "/api/v1/records", headers={"Authorization": "Bearer nope"}, timeout=10)
    assert wrong.status_code == 401
    page = httpx.get(fed.base + "/explorer/?service=docs-bot", timeout=10)
    assert page.status_code == 303 and page.headers["Location"].startswith("/explorer/login?next=")
    assert httpx.get(fed.base + "/metrics", timeout=10).status_code == 200  # Prometheus scrapes without it


def test_browser_sign_in_sets_a_cookie_that_is_not_the_token(fed: Fed):
    with httpx.Client(base_url=fed.base, timeout=10) as client:
        refused = client.post("/explorer/login", data={"token": "nope", "next": "/explorer/"})
        assert refused.status_code == 401 and "not one of the configured ones" in refused.text
        signed = client.post("/explorer/login", data={"token": TOKEN, "next": "/explorer/?sort=worst"})
        assert signed.status_code == 303 and signed.headers["Location"] == "/explorer/?sort=worst"
        cookie = signed.cookies["ragtrace_explorer"]
        assert TOKEN not in cookie
        assert "httponly" in signed.headers["set-cookie"].lower()
        assert "samesite=strict" in signed.headers["set-cookie"].lower()
        assert client.get("/explorer/").status_code == 200
        assert client.get("/api/v1/records").status_code == 200
        # after sign-in only the explorer's own pages: never another site
        elsewhere = client.post("/explorer/login", data={"token": TOKEN, "next": "//evil.example/"})
        assert elsewhere.headers["Location"] == "/explorer/"


def test_every_record_newest_first_in_pages(fed: Fed):
    body = records(fed)
    assert body["total"] == len(TURNS) and body["limit"] == PAGE_SIZE and len(body["records"]) == PAGE_SIZE
    assert body["next_offset"] == PAGE_SIZE
    rest = records(fed, offset=body["next_offset"])
    assert rest["next_offset"] is None and len(rest["records"]) == len(TURNS) - PAGE_SIZE
    listed = body["records"] + rest["records"]
    stamps = [r["time"] for r in listed]
    assert stamps == sorted(stamps, reverse=True)
    assert [r["trace_id"] for r in listed] == list(reversed(fed.traces.values()))  # the last request first
    first = listed[0]
    assert first["url"] == fed.base + first["path"] and first["path"].startswith("/explorer/records/")
    assert {s["metric"] for s in first["scores"]} == set(METRICS)


def test_filters_narrow_the_list(fed: Fed):
    assert sorted(names(fed, records(fed, service="docs-bot", limit=100))) == ["docs-1", "docs-2", "hostile"]
    assert sorted(names(fed, records(fed, session="sess-1", limit=100))) == ["shop-1", "shop-2", "shop-3"]
    assert sorted(names(fed, records(fed, user="carol", limit=100))) == ["shop-4", "shop-5"]
    assert names(fed, records(fed, outcome="skipped", limit=100)) == ["shop-3"]
    assert records(fed, outcome="error")["total"] == 0
    low = names(fed, records(fed, metric="faithfulness", max_score=0.6, limit=100))
    assert sorted(low) == ["shop-2", "shop-4"]  # the two degraded answers, with an invented claim each
    assert records(fed, pipeline="elements-qa", judge="local")["total"] == len(TURNS)
    assert records(fed, judge="openai/gpt-4o")["total"] == 0
    assert records(fed, window="1h")["total"] == len(TURNS)
    assert records(fed, since=time.time() + 60)["total"] == 0
    assert names(fed, records(fed, trace_id=fed.traces["docs-2"])) == ["docs-2"]
    # blank form fields filter nothing
    assert records(fed, service="", metric="", min_score="")["total"] == len(TURNS)


def test_worst_first_follows_the_metric_direction(fed: Fed):
    worst = records(fed, sort="worst", metric="faithfulness", limit=100)["records"]
    scores = [r["score"] for r in worst]
    assert scores == sorted(scores) and worst[0]["metric"] == "faithfulness"
    assert set(names(fed, {"records": worst[:2]})) == {"shop-2", "shop-4"}
    halluc = [r["score"] for r in records(fed, sort="worst", metric="hallucination", limit=100)["records"]]
    assert halluc == sorted(halluc, reverse=True)  # lower is better: the highest first
    chip = next(s for s in worst[0]["scores"] if s["metric"] == "faithfulness")
    assert chip["threshold"] == 0.7 and chip["side"] == "bad"  # the alert rules' threshold table


def test_bad_parameters_are_named(fed: Fed):
    for params, word in [
        ({"min_score": "abc"}, "min_score"),
        ({"outcome": "bogus"}, "outcome"),
        ({"sort": "best"}, "sort"),
        ({"limit": "0"}, "limit"),
        ({"window": "soon"}, "duration"),
    ]:
        response = fed.api("/api/v1/records", **params)
        assert response.status_code == 400 and word in response.json()["error"], (params, response.text)


def test_a_record_with_an_unsupported_claim(fed: Fed):
    trace_id = fed.traces["shop-2"]
    response = fed.api(f"/api/v1/records/{trace_id}")
    assert response.status_code == 200, response.text
    r = response.json()
    assert r["trace_id"] == trace_id and r["service"] == "shop-assistant" and r["session_id"] == "sess-1"
    assert r["question"] == fed.turns["shop-2"].question and "Niels Bohr" in r["answer"]
    bad = [c for c in r["claims"] if not c["supported"]]
    assert bad and any("Niels Bohr" in c["statement"] for c in bad)
    assert all(c["verdict"] in ("no", "idk") and c["reason"] and c["evidence"] for c in bad)
    # the invented claim's verdict in words: not found where the judge says so, else unsupported (not contradicted)
    assert all(c["kind"] in ("not_found", "unsupported") for c in bad if "Niels Bohr" in c["statement"])
    assert all(c["kind"] == "supported" for c in r["claims"] if c["verdict"] == "yes")
    assert any(c["supported"] and c["contexts"] for c in r["claims"])  # its evidence found in a context
    ranks = [c["rank"] for c in r["contexts"]]
    assert ranks == list(range(1, len(ranks) + 1)) and len(ranks) == 3
    assert all(isinstance(c["score"], float) and c["content"] for c in r["contexts"])
    assert all(c["useful"] in (True, False) for c in r["contexts"])  # context precision's verdict per rank
    assert r["latency"]["ttft_seconds"] >= 0.5  # the degraded app's slow first token
    assert r["latency"]["request_duration_seconds"] > 0 and r["output_tokens"] > 0 and r["input_tokens"] > 0
    assert r["model"] == "ragtrace/extractive-v1"
    assert r["trace_links"] == [{"name": "Jaeger", "url": f"http://jaeger.invalid:16686/trace/{trace_id}"}]
    faith = next(m for m in r["metrics"] if m["metric"] == "faithfulness")
    assert faith["status"] == "scored" and faith["score"] < 0.7 and faith["side"] == "bad" and faith["details"]


def test_a_skipped_metric_carries_its_reason(fed: Fed):
    r = fed.api(f"/api/v1/records/{fed.traces['shop-3']}").json()
    recall = next(m for m in r["metrics"] if m["metric"] == "context_recall")
    assert recall["status"] == "skipped" and recall["score"] is None and "reference" in recall["reason"]


def test_unknown_record_and_session(fed: Fed):
    assert fed.api("/api/v1/records/" + "0" * 32).status_code == 404
    assert fed.api("/api/v1/sessions/no-such-session").status_code == 404


def test_a_session_in_turn_order(fed: Fed):
    body = fed.api("/api/v1/sessions/sess-1").json()
    assert body["session_id"] == "sess-1"
    assert [t["trace_id"] for t in body["turns"]] == [fed.traces[n] for n in ("shop-1", "shop-2", "shop-3")]
    assert all(len(t["scores"]) == len(METRICS) for t in body["turns"])


def test_pages_forbid_scripts(fed: Fed):
    page = httpx.get(fed.base + f"/explorer/records/{fed.traces['hostile']}", headers=fed.auth, timeout=10)
    assert page.status_code == 200
    assert "script-src" not in page.headers["Content-Security-Policy"]  # default-src 'none' covers scripts
    assert "default-src 'none'" in page.headers["Content-Security-Policy"]
    assert "<script>" not in page.text and "&lt;script&gt;" in page.text
    assert "<img src=x" not in page.text
