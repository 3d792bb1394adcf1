"""One table of every ratio a ``make bench`` run measured, each beside its anchor.

Each bench given ``--json-out FILE`` appends one JSON line per figure to FILE: the figure, its value, and the
anchor it is read against (measured in the same run, side by side), with the ratio. ``make bench`` gives every
bench the same file and ends with::

    python3 bench/summary.py FILE

Why a file: the benches run one after another in separate processes (some start servers, some other venvs), so
this is the one place their ratios meet; the anchor travels with each figure, so a figure is never read against a
number from another day or another machine.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any


def add_json_out(ap: argparse.ArgumentParser) -> None:
    """The ``--json-out`` flag every bench takes."""
    ap.add_argument(
        "--json-out",
        type=Path,
        default=None,
        help="append this run's figures, each with its anchor and ratio, as JSON lines to this file "
        "(bench/summary.py prints them as one table)",
    )


def emit(
    path: Path | None,
    bench: str,
    figure: str,
    value: float | None,
    unit: str,
    anchor: str = "",
    anchor_value: float | None = None,
    ratio: float | None = None,
    note: str = "",
) -> None:
    """Append one figure; ``ratio`` defaults to value / anchor_value. Nothing happens without ``path``."""
    if path is None:
        return
    if ratio is None and value is not None and anchor_value:
        ratio = value / anchor_value
    row: dict[str, Any] = {
        "bench": bench,
        "figure": figure,
        "value": value,
        "unit": unit,
        "anchor": anchor,
        "anchor_value": anchor_value,
        "ratio": ratio,
        "note": note,
        "at": time.strftime("%Y-%m-%d %H:%M"),
        "host": f"{socket.gethostname()}, {os.cpu_count()} CPUs",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def _num(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}"


def _ratio(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}x"
    if v >= 1:
        return f"{v:.2f}x"
    return f"{v:.3g}x"


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a fixed-width table, in the order they were written."""
    head = ("bench", "figure", "value", "anchor", "anchor value", "ratio")
    body = [
        (
            r["bench"],
            r["figure"] + (f" ({r['note']})" if r.get("note") else ""),
            f"{_num(r['value'])} {r['unit']}".strip(),
            r.get("anchor") or "",
            _num(r.get("anchor_value")) if r.get("anchor_value") is not None else "",
            _ratio(r["ratio"]) if r.get("ratio") is not None else "",
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)), "  ".join("-" * w for w in widths)]
    for b in body:
        lines.append(
            "  ".join(c.ljust(w) if i < 2 or i == 3 else c.rjust(w) for i, (c, w) in enumerate(zip(b, widths)))
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Print every figure the benches wrote with --json-out as one table.")
    ap.add_argument("files", nargs="+", type=Path, help="JSON-lines files written by the benches' --json-out")
    ap.add_argument(
        "--failed",
        type=Path,
        help="a file listing the benches that exited with an error, one a line (make bench writes it): printed "
        "under the table, and the exit status is then 1",
    )
    args = ap.parse_args(argv)
    rows = []
    for path in args.files:
        if path.exists():
            rows += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    failed = args.failed.read_text().split("\n") if args.failed and args.failed.exists() else []
    failed = [line for line in failed if line.strip()]
    if rows:
        stamps = sorted({r["at"] for r in rows})
        print(f"\n== every ratio of this run ({stamps[0]} to {stamps[-1]}; {rows[0]['host']}) ==")
        print(table(rows))
    else:
        print("no figures were written")
    for line in failed:
        print(f"FAILED: {line} (its figures are missing above; its output says why)")
    return 1 if failed or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
