"""Regenerate ``data/corpus.jsonl`` and ``data/questions.jsonl`` from :mod:`elements`.

    python -m ragtrace_collector.examples.rag_app.build_corpus

Deterministic: the shipped files are exactly what this writes.
"""

from __future__ import annotations

import json
from pathlib import Path

from .elements import ELEMENTS, GENERAL

DATA = Path(__file__).resolve().parent / "data"

_PERIOD_ENDS = [2, 10, 18, 36, 54, 86, 118]


def period_of(z: int) -> int:
    for p, end in enumerate(_PERIOD_ENDS, start=1):
        if z <= end:
            return p
    raise ValueError(z)


def group_of(z: int) -> int | None:
    """IUPAC group 1-18; None for lanthanides and actinides (f-block)."""
    if z == 1:
        return 1
    if z == 2:
        return 18
    p = period_of(z)
    start = _PERIOD_ENDS[p - 2] + 1
    pos = z - start  # 0-based position in the period
    if p in (2, 3):
        return pos + 1 if pos < 2 else pos + 11
    if p in (4, 5):
        return pos + 1
    # periods 6 and 7: 2 s-block, then 14 f-block (57-70 / 89-102 without group), then 3..18
    if pos < 2:
        return pos + 1
    if pos < 16 and pos != 2:  # La/Ac counted as f-block start; Lu/Lr (pos 16) is group 3
        return None
    if pos == 2:
        return None
    return pos - 13


def _ordinal_phase(phase: str) -> str:
    return {"gas": "a gas", "liquid": "a liquid", "solid": "a solid"}[phase]


def passages() -> list[dict]:
    out: list[dict] = []
    for z, sym, name, cat, phase, year, who, fact in ELEMENTS:
        slug = name.lower()
        art = "an" if cat[0] in "aeiou" else "a"
        out.append(
            {
                "id": f"{slug}-identity",
                "title": name,
                "text": f"{name} is a chemical element with the symbol {sym} and atomic number {z}. "
                f"It is {art} {cat} and is {_ordinal_phase(phase)} at standard temperature and pressure.",
            }
        )
        if year is None:
            disc = f"{name} has been known since antiquity; no single discoverer is credited."
        elif year < 1500:
            disc = f"{name} is usually credited to {who}, who is said to have isolated it around {year}."
        else:
            disc = f"{name} was discovered in {year} by {who}."
        out.append({"id": f"{slug}-discovery", "title": name, "text": disc})
        out.append({"id": f"{slug}-fact", "title": name, "text": fact})
        g = group_of(z)
        pos = f"{name} sits in period {period_of(z)} of the periodic table"
        pos += f", in group {g}." if g is not None else ", in the f-block, which has no group number."
        out.append(
            {
                "id": f"{slug}-position",
                "title": name,
                "text": pos + f" Its atomic number, {z}, is the number of protons in its nucleus.",
            }
        )
    for gid, text in GENERAL:
        out.append({"id": f"general-{gid}", "title": gid.replace("-", " ").title(), "text": text})
    return out


def questions() -> list[dict]:
    """Questions answerable from the corpus, with reference answers and the passage that supports them."""
    out: list[dict] = []
    kinds = ["number", "discovery", "symbol", "fact"]
    for i, (z, sym, name, _cat, _phase, year, who, fact) in enumerate(ELEMENTS):
        slug = name.lower()
        kind = kinds[i % len(kinds)]
        if kind == "discovery" and year is None:
            kind = "symbol"
        if kind == "number":
            q = f"What is the atomic number of {name.lower()}?"
            ref = f"The atomic number of {name.lower()} is {z}."
            doc = f"{slug}-identity"
        elif kind == "discovery":
            assert year is not None  # elements without a discovery year were given "symbol" above
            q = f"Who discovered {name.lower()} and when?"
            ref = (
                f"{name} was discovered in {year} by {who}."
                if year >= 1500
                else f"{name} is credited to {who}, around {year}."
            )
            doc = f"{slug}-discovery"
        elif kind == "symbol":
            q = f"What is the chemical symbol of {name.lower()}?"
            ref = f"The chemical symbol of {name.lower()} is {sym}."
            doc = f"{slug}-identity"
        else:
            q = f"What is notable about {name.lower()}?"
            ref = fact
            doc = f"{slug}-fact"
        out.append({"question": q, "reference": ref, "reference_doc_ids": [doc], "element": name})
    return out


def main() -> None:
    DATA.mkdir(exist_ok=True)
    with open(DATA / "corpus.jsonl", "w", encoding="utf-8") as f:
        for p in passages():
            f.write(json.dumps(p, ensure_ascii=False) + "\n")
    with open(DATA / "questions.jsonl", "w", encoding="utf-8") as f:
        for q in questions():
            f.write(json.dumps(q, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
