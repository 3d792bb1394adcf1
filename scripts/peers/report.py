"""Print what the collector makes of each peer capture: records per request and the fields found.

    .venv/bin/python scripts/peers/report.py [setup ...]

Reads ``tests/fixtures/peers/<setup>/requests-*.binpb`` through the receiver's decoder and the
assembler (the path a served collector takes after HTTP) and prints one line per setup.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ragtrace_collector.processor.assembly.memory import InMemoryAssemblyState
from ragtrace_collector.processor.pipeline import Pipeline
from ragtrace_collector.receiver.decode import extract_spans, parse_protobuf

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "peers"
REQUESTS = 6  # every app asks six questions


def records_of(setup: str) -> list:
    assembler = Pipeline(InMemoryAssemblyState(grace_seconds=0.0))
    for path in sorted((FIXTURES / setup).glob("requests-*.binpb")):
        assembler.add(extract_spans(parse_protobuf(path.read_bytes())))
    return sorted(assembler.collect(everything=True), key=lambda r: r.start_time_unix_nano or 0)


def summary(setup: str) -> str:
    records = records_of(setup)
    versions = json.loads((FIXTURES / setup / "versions.json").read_text())["packages"]
    key = {k: v for k, v in versions.items() if not k.startswith("opentelemetry")}
    full = [r for r in records if r.user_input and r.response and r.retrieved_contexts]
    ctx = sorted({len(r.retrieved_contexts) for r in records})
    stuffed = sum(1 for r in records if r.user_input and "Context:" in r.user_input)
    return (
        f"{setup}: records {len(records)} for {REQUESTS} requests ({len(records) / REQUESTS:.2f}/request), "
        f"full {len(full)}; contexts per record {ctx}; question stuffed {stuffed}; "
        f"model {sorted({r.model for r in records if r.model})}; "
        f"tokens {[(r.input_tokens, r.output_tokens) for r in records]}; "
        f"TTFT {[f'{r.ttft_seconds:.3f}' if r.ttft_seconds is not None else '-' for r in records]}; "
        f"streamed {[r.streamed for r in records]}\n    packages {key}"
    )


def main(argv: list[str]) -> int:
    setups = argv or sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
    for setup in setups:
        print(summary(setup))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
