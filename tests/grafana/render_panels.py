"""Render dashboard panels' data from Prometheus to PNG charts (no Grafana here): one PNG per dashboard,
one subplot per panel, every query of the panel drawn as Grafana would draw its series."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

SKIP_TYPES = {"row", "table"}


def _legend(fmt: str, labels: dict[str, str]) -> str:
    if not fmt or fmt == "__auto":
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"
    out = fmt
    for k, v in labels.items():
        out = out.replace("{{" + k + "}}", v)
    return out


def render_dashboard(
    dashboard: dict,
    panel_data: dict[tuple[str, str], list[dict]],
    out: Path,
    marks: dict[str, float] | None = None,
    t0: float | None = None,
) -> Path:
    """``panel_data`` maps (panel title, refId) -> Prometheus ``matrix`` result."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [p for p in dashboard["panels"] if p["type"] not in SKIP_TYPES]
    cols = 2
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(14, 3.2 * rows), squeeze=False)
    start = (
        t0
        if t0 is not None
        else min((float(v[0]) for series in panel_data.values() for s in series for v in s["values"]), default=0.0)
    )
    for ax, panel in zip(axes.flat, panels):
        title = panel["title"]
        m = re.search(r" \[(\w+)\]$", title)
        if m:  # a repeated row's panel: "... $metric ... [faithfulness]"
            title = title[: m.start()].replace("$metric", m.group(1))
        ax.set_title(title.replace("$", ""), fontsize=9)
        if panel["type"] == "heatmap":
            _heatmap(ax, panel_data.get((panel["title"], panel["targets"][0]["refId"]), []), start)
        else:
            right = None
            for t in panel["targets"]:
                series = panel_data.get((panel["title"], t["refId"]), [])
                props = _override_properties(panel, t["refId"])
                axis = ax
                style: dict = {}
                if props.get("custom.axisPlacement") == "right":  # sample sizes on a right-hand axis, as in Grafana
                    right = right or ax.twinx()
                    axis = right
                    style = {"alpha": 0.35, "linestyle": ":"}
                elif "custom.lineStyle" in props:  # the threshold line
                    style = {"color": "red", "linestyle": "--", "linewidth": 1}
                if "max" in props and axis is ax:
                    ax.set_ylim(props.get("min", 0), props["max"])
                for s in series[:12]:
                    xs = [float(v[0]) - start for v in s["values"]]
                    ys = [float(v[1]) for v in s["values"]]
                    axis.plot(xs, ys, label=_legend(t.get("legendFormat", ""), s["metric"]), **style)
            handles, labels = ax.get_legend_handles_labels()
            if right is not None:
                h2, l2 = right.get_legend_handles_labels()
                handles, labels = handles + h2, labels + l2
            if handles:
                ax.legend(handles, labels, fontsize=6, loc="best")
        for name, at in (marks or {}).items():
            ax.axvline(at - start, color="red", linestyle="--", linewidth=1)
            ax.text(at - start, ax.get_ylim()[1], name, color="red", fontsize=7, va="top")
        ax.set_xlabel("seconds", fontsize=7)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle(dashboard["title"], fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out


def _override_properties(panel: dict, ref: str) -> dict[str, Any]:
    """Field override properties of one query (by refId), as Grafana applies them."""
    props: dict[str, Any] = {}
    for o in panel.get("fieldConfig", {}).get("overrides", []):
        if o["matcher"].get("id") == "byFrameRefID" and o["matcher"].get("options") == ref:
            props.update({p["id"]: p.get("value") for p in o["properties"]})
    return props


def _heatmap(ax: Any, series: list[dict], start: float) -> None:
    buckets = sorted(series, key=lambda s: float(s["metric"].get("le", "inf").replace("+Inf", "inf")))
    if not buckets:
        return
    times = [float(v[0]) - start for v in buckets[0]["values"]]
    grid = []
    prev = None
    for s in buckets:  # cumulative buckets -> per-bucket counts
        vals = {float(v[0]) - start: float(v[1]) for v in s["values"]}
        row = [vals.get(t, 0.0) for t in times]
        grid.append([a - b for a, b in zip(row, prev)] if prev else row)
        prev = row
    labels = [s["metric"].get("le", "") for s in buckets]
    ax.imshow(
        grid,
        aspect="auto",
        origin="lower",
        cmap="viridis",
        extent=(times[0], times[-1] if len(times) > 1 else times[0] + 1, 0, len(labels)),
    )
    ax.set_yticks([i + 0.5 for i in range(0, len(labels), 4)])
    ax.set_yticklabels(labels[::4], fontsize=6)
