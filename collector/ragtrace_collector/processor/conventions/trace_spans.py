"""A trace's spans, classified once: sorted, grouped by role, with the request span picked out.

Every extractor (:mod:`extractors`) reads a :class:`TraceSpans`; :func:`classify_spans` builds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ragtrace import attributes as A
from ragtrace_collector.model.spans import SpanData
from ragtrace_collector.processor.conventions import messages, roles


@dataclass(frozen=True)
class GeneratorMessages:
    """One generator span's parsed prompt and completion messages."""

    inputs: list[messages.Message]
    outputs: list[messages.Message]


@dataclass(frozen=True)
class TraceSpans:
    """One trace's spans sorted by (start, end) and grouped by role (each group keeps that order)."""

    spans: tuple[SpanData, ...]
    pipelines: tuple[SpanData, ...]
    retrievers: tuple[SpanData, ...]
    rerankers: tuple[SpanData, ...]
    generators: tuple[SpanData, ...]
    embeddings: tuple[SpanData, ...]
    tools: tuple[SpanData, ...]
    top: SpanData | None  # the outermost pipeline span (explicit ragtrace pipelines first)
    root: SpanData | None  # the earliest root span (or the earliest span when every span has a parent)

    @cached_property
    def _by_id(self) -> dict[str, SpanData]:
        return {s.span_id: s for s in self.spans}

    def ancestors(self, span: SpanData) -> list[SpanData]:
        """The span's ancestors present in the trace, nearest first (bounded against cycles)."""
        out: list[SpanData] = []
        node = self._by_id.get(span.parent_id) if span.parent_id else None
        while node is not None and len(out) < 256 and node is not span:
            out.append(node)
            node = self._by_id.get(node.parent_id) if node.parent_id else None
        return out

    @cached_property
    def _calls(self) -> dict[int, tuple[tuple[SpanData, ...], list[list[SpanData]]]]:
        return {}

    def calls(self, group: tuple[SpanData, ...]) -> list[list[SpanData]]:
        """``group``'s spans as calls: a span nested in another span of the group is the same call, written twice
        by layered instrumentations (LlamaIndex ``predict`` → ``chat``, a retriever → ``_retrieve``). Each call
        lists its outermost span first, then the nested ones in start order. Computed once per group (the summary
        and the record read the retrievals' and the generators' calls several times)."""
        if len(group) <= 1:
            return [[s] for s in group]
        held = self._calls.get(id(group))
        if held is None or held[0] is not group:
            held = self._calls[id(group)] = (group, self._group_calls(group))
        return [list(call) for call in held[1]]

    def _group_calls(self, group: tuple[SpanData, ...]) -> list[list[SpanData]]:
        members = {s.span_id for s in group}
        calls: dict[str, list[SpanData]] = {}
        for s in group:
            outer = s
            for a in self.ancestors(s):
                if a.span_id in members:
                    outer = a
            calls.setdefault(outer.span_id, []).append(s)
        return list(calls.values())

    @cached_property
    def unenclosed(self) -> int:
        """How many spans have no ancestor present in the trace (the roots of what arrived)."""
        by_id = self._by_id
        return sum(1 for s in self.spans if not s.parent_id or by_id.get(s.parent_id, s) is s)

    @property
    def request(self) -> SpanData | None:
        """The span standing for the whole request: the outermost pipeline span, else the root."""
        return self.top or self.root

    def request_first(self) -> list[SpanData]:
        """Every span, the request span first and the others in start order."""
        request = self.request
        if request is None:
            return list(self.spans)
        return [request] + [s for s in self.spans if s is not request]

    @cached_property
    def generator_messages(self) -> tuple[GeneratorMessages, ...]:
        """Each generator's messages, in generator order; parsed on first use (only full records read texts)."""
        return tuple(
            GeneratorMessages(messages.input_messages(s.attrs, s.events), messages.output_messages(s.attrs, s.events))
            for s in self.generators
        )


def _depth_order(spans: list[SpanData]) -> dict[str, int]:
    """Depth of each span in the trace tree (unknown parents count as roots)."""
    by_id = {s.span_id: s for s in spans}
    depth: dict[str, int] = {}

    def walk(span: SpanData) -> int:
        seen: list[SpanData] = []
        node = span
        d = 0
        while node.parent_id and node.parent_id in by_id and node.span_id not in depth and len(seen) < 256:
            seen.append(node)
            node = by_id[node.parent_id]
        d = depth.get(node.span_id, 0)
        depth.setdefault(node.span_id, d)
        for s in reversed(seen):
            d += 1
            depth[s.span_id] = d
        return depth[span.span_id]

    for s in spans:
        if s.span_id not in depth:
            walk(s)
    return depth


def classify_spans(spans: list[SpanData]) -> TraceSpans:
    """Sort a trace's spans (any order, any mix of conventions) and group them by :func:`roles.span_role`."""
    ordered = sorted(spans, key=lambda s: (s.start, s.end))
    depth = _depth_order(ordered)
    by_role: dict[str, list[SpanData]] = {}
    for s in ordered:
        by_role.setdefault(roles.span_role(s.attrs), []).append(s)
    pipelines = by_role.get(roles.PIPELINE, [])
    roots = [s for s in ordered if depth.get(s.span_id, 0) == 0]

    explicit = [s for s in pipelines if s.attrs.get(A.RAGTRACE_SPAN_ROLE) == roles.PIPELINE]
    candidates = explicit or pipelines
    top = min(candidates, key=lambda s: (depth.get(s.span_id, 0), s.start)) if candidates else None
    root = min(roots, key=lambda s: s.start) if roots else (ordered[0] if ordered else None)
    return TraceSpans(
        spans=tuple(ordered),
        pipelines=tuple(pipelines),
        retrievers=tuple(by_role.get(roles.RETRIEVER, [])),
        rerankers=tuple(by_role.get(roles.RERANKER, [])),
        generators=tuple(by_role.get(roles.GENERATOR, [])),
        embeddings=tuple(by_role.get(roles.EMBEDDING, [])),
        tools=tuple(by_role.get(roles.TOOL, [])),
        top=top,
        root=root,
    )
