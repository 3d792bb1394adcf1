"""Passages and the question inside a stuffed prompt, for instrumentations that record no retrieval.

An app traced only at its model call (the official OTel GenAI instrumentation with a plain span around its
retrieval, a bare client library) still shows what it retrieved: the passages it pasted into the prompt. They are
read only from a block the prompt itself labels as context, in the shapes the common templates write:

* a header line (``Context:``, ``Context information is below.``, ``Documents:``, ``Sources:``, ``Retrieved
  context:``...), optionally fenced by ``-----`` lines (LlamaIndex's QA template), ending at the next label
  (``Question:``, ``Query:``, ``Answer:``...) or fence; or the header with the passages on its own line
  (``Context: {context}``, LangChain's ``rlm/rag-prompt``);
* an XML-style ``<context>`` / ``<documents>`` element.

Inside the block, passages are separated by blank lines, else one a line; list markers (``1.``, ``[2]``, ``-``,
``Document 3:``) are not part of a passage. Every passage returned is text of the prompt, never made up; a prompt
with no labelled block gives none. The question is the text after the prompt's last ``Question:`` / ``Query:``
label (up to the next label), so a stuffed template is told apart from what the user asked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HEADER = re.compile(
    r"^\s*(?:#+\s*)?(?:retrieved\s+|relevant\s+)?"
    r"(?:context(?:\s+information)?|contexts|documents|passages|sources|search results)"
    r"(?:\s+is\s+below)?(?:\s*[:.]\s*(?P<rest>.*)|\s*)$",
    re.IGNORECASE,
)
_LABEL = re.compile(
    r"^\s*(?P<label>question|query|user question|answer|helpful answer|instructions?|input|output)\s*:\s*(?P<rest>.*)$",
    re.IGNORECASE,
)
_QUESTION_LABELS = ("question", "query", "user question")
_FENCE = re.compile(r"^\s*(?:-{3,}|={3,}|\*{3,}|_{3,})\s*$")
_XML = re.compile(r"<(context|contexts|documents|sources|passages)>\s*(.*?)\s*</\1>", re.IGNORECASE | re.DOTALL)
_MARKER = re.compile(r"^\s*(?:\[\d+\]|\d+[.)]|[-*•]|(?:document|doc|source|passage|chunk)\s*\d*\s*[:.])\s*", re.I)
_MIN_PASSAGE = 12  # characters: shorter "passages" are labels or stray words, not retrieved text


@dataclass(frozen=True)
class StuffedPrompt:
    """What a prompt message holds besides instructions: the labelled passages and the labelled question."""

    passages: list[str]
    question: str | None


def _passages(block: str) -> list[str]:
    """A context block's passages: blank-line separated, else one a line; list markers dropped."""
    block = block.strip()
    if not block:
        return []
    parts = re.split(r"\n\s*\n", block)
    if len(parts) == 1:
        parts = block.split("\n")
    out: list[str] = []
    for part in parts:
        text = _MARKER.sub("", part.strip(), count=1).strip()
        if len(text) >= _MIN_PASSAGE and not _FENCE.match(text) and text not in out:
            out.append(text)
    return out


def _labelled_blocks(lines: list[str]) -> list[str]:
    """The text of every block the prompt labels as context (header line, then until a label or fence)."""
    blocks: list[str] = []
    i = 0
    while i < len(lines):
        m = _HEADER.match(lines[i])
        if m is None:
            i += 1
            continue
        rest = (m.group("rest") or "").strip()
        body: list[str] = [rest] if rest else []
        i += 1
        while i < len(lines) and not body and _FENCE.match(lines[i]):
            i += 1  # the fence opening the block
        while i < len(lines) and not _LABEL.match(lines[i]) and not _FENCE.match(lines[i]):
            body.append(lines[i])
            i += 1
        blocks.append("\n".join(body))
    return blocks


def _question(lines: list[str]) -> str | None:
    """The text after the last question label, up to the next label or fence (a blank line ends it too)."""
    found: str | None = None
    for i, line in enumerate(lines):
        m = _LABEL.match(line)
        if m is None or m.group("label").lower() not in _QUESTION_LABELS:
            continue
        text = [m.group("rest").strip()]
        for nxt in lines[i + 1 :]:
            if _LABEL.match(nxt) or _HEADER.match(nxt) or _FENCE.match(nxt) or not nxt.strip():
                break
            text.append(nxt.strip())
        joined = " ".join(t for t in text if t).strip()
        if joined:
            found = joined
    return found


def read(text: str) -> StuffedPrompt:
    """The passages and question a prompt message labels (see the module docstring); empty when none."""
    passages: list[str] = []
    for m in _XML.finditer(text):
        passages.extend(p for p in _passages(m.group(2)) if p not in passages)
    lines = _XML.sub("", text).split("\n")
    for block in _labelled_blocks(lines):
        passages.extend(p for p in _passages(block) if p not in passages)
    return StuffedPrompt(passages, _question(lines))
