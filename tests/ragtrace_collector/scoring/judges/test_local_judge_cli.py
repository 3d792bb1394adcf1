"""`ragtrace-collector evaluate ... --judge local` on the shared labelled data, end to end."""

from __future__ import annotations

import json
from pathlib import Path

from ragtrace_collector.cli import main


def test_evaluate_cli_scores_shared_rows_with_the_local_judge(shared_dir: Path, tmp_path: Path) -> None:
    rows = [json.loads(line) for line in (shared_dir / "data" / "ragtruth-qa-dev.jsonl").open()][:12]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "scores.jsonl"
    code = main(
        [
            "evaluate",
            str(data),
            "--metrics",
            "faithfulness,hallucination,safety",
            "--judge",
            "local",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    # one line per row, in the order rows finish (several are scored at once), each with its input line
    assert sorted((line["line"], line["id"]) for line in lines) == [(n, r["id"]) for n, r in enumerate(rows, 1)]
    for line in lines:
        assert line["judge"] == "local"
        faith, hall = line["scores"]["faithfulness"], line["scores"]["hallucination"]
        assert 0.0 <= faith <= 1.0 and abs(faith + hall - 1.0) < 1e-9
        assert line["scores"]["safety"] is None
        assert line["results"]["safety"]["status"] == "skipped"
        claims = line["results"]["faithfulness"]["details"]["claims"]
        assert all(0.0 <= c["confidence"] <= 1.0 and c["verdict"] in ("yes", "no", "idk") for c in claims)
