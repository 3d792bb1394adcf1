"""Contradicted or not found: why the contexts do not support a claim, once the judge has decided they do not.

The claim-support models say *whether* a claim is supported; a reader of the verdict also needs to know
*how* it fails: the context says otherwise (``no``, contradicted) or the context does not say (``idk``, not
found). This module only tells those two apart for claims already judged unsupported, so it can never make a
claim supported. A claim is contradicted by a context sentence that speaks of the same thing (shares most of
the claim's content words) and

* differs in negation ("has" / "does not have"), or
* states another number, month or unit where the claim states one ("two years" / "five-year"), or
* uses the opposite word (a small antonym table: "increases" / "decreases", "before" / "after"), or
* states a value as current where the sentence says it was ("now costs $10" / "cost $10 until March"), or
* names another person, place or product where the claim names one not in the contexts, or
* has the same words on either side of a verb the other way round ("the tenant pays the landlord" / "the
  landlord pays the tenant": swapped roles), or
* contains every content word of the claim and still does not support it (swapped roles, quantifiers).

What it returns quotes the sentence around the conflicting words, for the explanation a user reads
("contradicted by context #2: '...for two years...'").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import text as T
from .cross_encoder import lexical_similarities
from .features import ContextIndex

# Opposites that keep most of a sentence's other words: the contradictions word overlap cannot see.
_ANTONYM_PAIRS = (
    ("increase", "decrease"),
    ("increase", "reduce"),
    ("rise", "fall"),
    ("rose", "fell"),
    ("risen", "fallen"),
    ("grow", "shrink"),
    ("grew", "shrank"),
    ("gained", "lost"),
    ("raise", "lower"),
    ("higher", "lower"),
    ("more", "less"),
    ("more", "fewer"),
    ("most", "least"),
    ("before", "after"),
    ("earlier", "later"),
    ("first", "last"),
    ("early", "late"),
    ("allow", "prohibit"),
    ("allow", "forbid"),
    ("permit", "prohibit"),
    ("permitted", "prohibited"),
    ("allowed", "prohibited"),
    ("allowed", "forbidden"),
    ("accept", "reject"),
    ("accepted", "rejected"),
    ("include", "exclude"),
    ("included", "excluded"),
    ("open", "close"),
    ("open", "closed"),
    ("opened", "closed"),
    ("on", "off"),
    ("enable", "disable"),
    ("enabled", "disabled"),
    ("start", "stop"),
    ("start", "end"),
    ("begin", "end"),
    ("win", "lose"),
    ("won", "lost"),
    ("gain", "loss"),
    ("profit", "loss"),
    ("above", "below"),
    ("over", "under"),
    ("inside", "outside"),
    ("internal", "external"),
    ("maximum", "minimum"),
    ("max", "min"),
    ("faster", "slower"),
    ("fast", "slow"),
    ("larger", "smaller"),
    ("largest", "smallest"),
    ("bigger", "smaller"),
    ("biggest", "smallest"),
    ("heavier", "lighter"),
    ("longer", "shorter"),
    ("longest", "shortest"),
    ("older", "newer"),
    ("oldest", "newest"),
    ("older", "younger"),
    ("cheaper", "dearer"),
    ("cheaper", "expensive"),
    ("cheapest", "expensive"),
    ("best", "worst"),
    ("better", "worse"),
    ("high", "low"),
    ("hot", "cold"),
    ("warm", "cool"),
    ("wet", "dry"),
    ("true", "false"),
    ("correct", "incorrect"),
    ("safe", "unsafe"),
    ("safe", "dangerous"),
    ("legal", "illegal"),
    ("available", "unavailable"),
    ("possible", "impossible"),
    ("mandatory", "optional"),
    ("required", "optional"),
    ("must", "may"),
    ("always", "sometimes"),
    ("always", "never"),
    ("all", "some"),
    ("all", "none"),
    ("every", "some"),
    ("everyone", "nobody"),
    ("each", "some"),
    ("only", "also"),
    ("least", "most"),
    ("minimum", "maximum"),
    ("free", "paid"),
    ("free", "charged"),
    ("public", "private"),
    ("full", "empty"),
    ("full", "partial"),
    ("north", "south"),
    ("east", "west"),
    ("left", "right"),
    ("buy", "sell"),
    ("bought", "sold"),
    ("import", "export"),
    ("send", "receive"),
    ("sent", "received"),
    ("lend", "borrow"),
    ("add", "remove"),
    ("added", "removed"),
    ("success", "failure"),
    ("succeed", "fail"),
    ("pass", "fail"),
    ("present", "absent"),
    ("same", "different"),
    ("weekday", "weekend"),
    ("weekdays", "weekends"),
    ("daily", "weekly"),
    ("weekly", "monthly"),
    ("monthly", "yearly"),
    ("monthly", "annually"),
    ("lifetime", "limited"),
    ("permanent", "temporary"),
    ("increase", "drop"),
    ("up", "down"),
    ("upstream", "downstream"),
    ("hotter", "colder"),
    ("warmer", "cooler"),
    ("upper", "lower"),
    ("inbound", "outbound"),
)
ANTONYMS: dict[str, frozenset[str]] = {}
for _a, _b in _ANTONYM_PAIRS:
    for _x, _y in ((_a, _b), (_b, _a), (T.stem(_a), T.stem(_b)), (T.stem(_b), T.stem(_a))):
        ANTONYMS[_x] = ANTONYMS.get(_x, frozenset()) | {_y}


def _base(word: str) -> str:
    """The form antonyms are matched in: stemmed, and without the final e that the stemmer keeps on "increase"
    but strips with the s of "increases" (so that every inflection of a word meets its opposite's)."""
    return T.stem(word).removesuffix("e")


_ANTONYM_BASES: dict[str, frozenset[str]] = {}
for _a, _b in _ANTONYM_PAIRS:
    for _x, _y in ((_a, _b), (_b, _a)):
        _ANTONYM_BASES[_base(_x)] = _ANTONYM_BASES.get(_base(_x), frozenset()) | {_base(_y)}

# One name for each unit however it is written, so that "2 L" and "2 litres" agree and "23 kg" and "23 pounds" do not.
_UNIT_NAMES = {
    "kilometre": ("km", "kilometre", "kilometres", "kilometer", "kilometers"),
    "metre": ("m", "metre", "metres", "meter", "meters"),
    "centimetre": ("cm", "centimetre", "centimetres", "centimeter", "centimeters"),
    "millimetre": ("mm", "millimetre", "millimetres", "millimeter", "millimeters"),
    "mile": ("mi", "mile", "miles"),
    "inch": ("in", "inch", "inches"),
    "foot": ("ft", "foot", "feet"),
    "gram": ("g", "gram", "grams", "gramme", "grammes"),
    "kilogram": ("kg", "kgs", "kilogram", "kilograms", "kilo", "kilos"),
    "milligram": ("mg", "milligram", "milligrams"),
    "pound": ("lb", "lbs", "pound", "pounds"),
    "ounce": ("oz", "ounce", "ounces"),
    "litre": ("l", "litre", "litres", "liter", "liters"),
    "millilitre": ("ml", "millilitre", "millilitres", "milliliter", "milliliters"),
    "gallon": ("gallon", "gallons"),
    "celsius": ("c", "celsius", "centigrade"),
    "fahrenheit": ("f", "fahrenheit"),
    "kilobyte": ("kb", "kilobyte", "kilobytes"),
    "megabyte": ("mb", "megabyte", "megabytes"),
    "gigabyte": ("gb", "gigabyte", "gigabytes"),
    "terabyte": ("tb", "terabyte", "terabytes"),
}
_UNIT_NAME = {form: name for name, forms in _UNIT_NAMES.items() for form in forms}
_WEEKDAY = re.compile(r"\b(mon|tues|wednes|thurs|fri|satur|sun)days?\b", re.I)
_NOW = frozenset(["now", "currently", "current", "presently", "present", "today", "still", "nowadays"])
_BEFORE_NOW = re.compile(
    r"\b(?:until|till|used to|formerly|previously|no longer|was once|were once|ended|from \d{4} to \d{4})\b", re.I
)

_UNITS = frozenset(
    [
        "mm",
        "cm",
        "m",
        "km",
        "in",
        "inch",
        "inches",
        "ft",
        "foot",
        "feet",
        "mile",
        "miles",
        "mg",
        "g",
        "kg",
        "gram",
        "grams",
        "kilogram",
        "kilograms",
        "lb",
        "lbs",
        "pound",
        "pounds",
        "oz",
        "ounce",
        "ounces",
        "ml",
        "l",
        "litre",
        "litres",
        "liter",
        "liters",
        "millilitre",
        "millilitres",
        "milliliter",
        "milliliters",
        "gallon",
        "gallons",
        "second",
        "seconds",
        "minute",
        "minutes",
        "min",
        "mins",
        "hour",
        "hours",
        "hr",
        "hrs",
        "day",
        "days",
        "week",
        "weeks",
        "month",
        "months",
        "year",
        "years",
        "w",
        "kw",
        "watt",
        "watts",
        "kwh",
        "v",
        "volt",
        "volts",
        "mb",
        "gb",
        "tb",
        "kb",
        "percent",
        "%",
        "usd",
        "eur",
        "gbp",
        "dollar",
        "dollars",
        "euro",
        "euros",
        "pence",
        "cents",
        "per",
        *_UNIT_NAME,
    ]
)
_NEGATION_WORDS = T.NEGATIONS | {"nobody", "nothing", "nowhere", "neither"}
_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*|\d+(?:[.,]\d+)*%?")
#: Conflict kinds that say the context states otherwise (``restated``, every word present yet unsupported, only
#: explains a verdict already reached).
STATES_OTHERWISE = frozenset({"negation", "number", "date", "unit", "antonym", "stale", "name", "order"})
#: Share of the claim's content words a context sentence must hold to speak of the same thing.
SAME_TOPIC = 0.5


@dataclass(frozen=True)
class Conflict:
    """A context sentence that contradicts a claim: which context it is in, the words of it that conflict,
    and what kind of conflict it is (for the explanation and for counting)."""

    context: int
    sentence: str
    quote: str
    kind: str


def _tokens(text: str) -> list[str]:
    out = []
    for w in _WORD.findall(text):
        w = w.lower()
        if w.endswith("n't"):
            out += [w[:-3], "not"] if len(w) > 3 else ["not"]
        else:
            out.append(w)
    return out


def _negations(tokens: Sequence[str]) -> int:
    return sum(t in _NEGATION_WORDS for t in tokens)


def _units_after_numbers(tokens: Sequence[str]) -> dict[str, str]:
    """Each number followed by a unit word ('2 litres', '30 days', 'five-year' → 5: year)."""
    out: dict[str, str] = {}
    for i, tok in enumerate(tokens):
        head, _, tail = tok.partition("-")
        number = T.numbers(head)
        if not number:
            continue
        unit = tail if tail in _UNITS else (tokens[i + 1] if i + 1 < len(tokens) and tokens[i + 1] in _UNITS else "")
        if unit:
            out[next(iter(number))] = _UNIT_NAME.get(unit) or unit.rstrip("s")
    return out


def _weekdays(text: str) -> set[str]:
    return {m.group(1).lower() for m in _WEEKDAY.finditer(text)}


# The order check looks at every pair around every shared word (cubic): a claim sharing more words than this is no
# simple "who did what to whom" statement, and a hostile one-sentence response must not stall the judge.
_ORDER_MAX_WORDS = 40


def _swapped_around(c_tok: Sequence[str], s_tok: Sequence[str]) -> list[str]:
    """Two words on either side of a shared word in the claim that stand the other way round in the sentence
    ("tenant pays landlord" / "landlord pays tenant"); [] when none, or when one says it in the passive ("by")."""
    c_words = [w for w in c_tok if w not in T.STOPWORDS]
    s_words = [w for w in s_tok if w not in T.STOPWORDS]
    c_at = {w: i for i, w in reversed(list(enumerate(c_words)))}
    s_at = {w: i for i, w in reversed(list(enumerate(s_words)))}
    shared = [w for w in c_at if w in s_at]
    if ("by" in c_tok) != ("by" in s_tok) or len(shared) > _ORDER_MAX_WORDS:
        return []
    for pivot in shared:
        before = [w for w in shared if c_at[w] < c_at[pivot]]
        after = [w for w in shared if c_at[w] > c_at[pivot]]
        for a in before:
            for b in after:
                if s_at[b] < s_at[pivot] < s_at[a]:
                    return [b, pivot, a]
    return []


def quote(sentence: str, words: Sequence[str], width: int = 6) -> str:
    """The part of ``sentence`` around the first of ``words`` found in it (``width`` words either side), marked
    with ellipses where cut; the whole sentence (up to 160 characters) when none is found."""
    parts = sentence.split()
    lowered = [p.lower().strip(".,;:!?()\"'") for p in parts]
    wanted = {w.lower() for w in words}
    for i, p in enumerate(lowered):
        if (
            p in wanted
            or any(p.startswith(w) for w in wanted if len(w) > 2)
            or any(w in p for w in wanted if w.isdigit())
        ):
            lo, hi = max(0, i - width), min(len(parts), i + width + 1)
            return ("..." if lo else "") + " ".join(parts[lo:hi]) + ("..." if hi < len(parts) else "")
    return sentence if len(sentence) <= 160 else sentence[:157] + "..."


def _conflict_words(claim: str, sentence: str, index: ContextIndex) -> tuple[str, list[str]] | None:
    """The kind of conflict between ``claim`` and ``sentence`` and the sentence's words that show it."""
    c_tok, s_tok = _tokens(claim), _tokens(sentence)
    c_set, s_set = set(c_tok), set(s_tok)
    if (_negations(c_tok) > 0) != (_negations(s_tok) > 0):
        neg = [t for t in s_tok if t in _NEGATION_WORDS] or [t for t in s_tok if t in c_set and t not in T.STOPWORDS]
        return "negation", neg
    # "five-year" holds the number five: hyphens apart, as the context may say "five years"
    c_numbers, s_numbers = T.numbers(claim.replace("-", " ")), T.numbers(sentence.replace("-", " "))
    novel = c_numbers - index.numbers - T.numbers(index.lower.replace("-", " "))
    if novel and s_numbers:
        return "number", sorted(s_numbers - c_numbers) or sorted(s_numbers)
    c_months, s_months = T.months(claim), T.months(sentence)
    if c_months - index.months and s_months and not c_months & s_months:
        return "date", [m for m in s_tok if m[:3] in s_months]
    c_days, s_days = _weekdays(claim), _weekdays(sentence)
    if c_days - _weekdays(index.lower) and s_days and not c_days & s_days:
        return "date", [m.group() for m in _WEEKDAY.finditer(sentence)]
    c_units, s_units = _units_after_numbers(c_tok), _units_after_numbers(s_tok)
    for number, unit in c_units.items():
        if number in s_units and s_units[number] != unit:
            return "unit", [number, s_units[number]]
    s_bases = {_base(w): w for w in s_set}
    for w in c_set - s_set:
        opposite = _ANTONYM_BASES.get(_base(w), frozenset()) & s_bases.keys()
        if opposite:
            return "antonym", sorted(s_bases[b] for b in opposite)
    if c_set & _NOW and not s_set & _NOW and _BEFORE_NOW.search(sentence):
        return "stale", [m.group() for m in _BEFORE_NOW.finditer(sentence)]
    novel_names = [n for n in T.capitalised_spans(claim) if n.lower() not in index.lower]
    if novel_names:
        others = [n for n in T.capitalised_spans(sentence) if n.lower() not in claim.lower()]
        if others:
            return "name", [w for n in others for w in n.split()[:1]]
    swapped = _swapped_around(c_tok, s_tok)
    if swapped:
        return "order", swapped
    return None


def find_conflict(claim: str, index: ContextIndex, candidates: Sequence[int]) -> Conflict | None:
    """The first of the ``candidates`` (indexes into ``index.sentences``, best first) that contradicts ``claim``."""
    claim_words = set(T.content_words(claim))
    if not claim_words:
        return None
    where = index.sentence_context or [0] * len(index.sentences)
    about = []
    for rank, j in enumerate(candidates):
        words = index.sentence_tokens[j] if j < len(index.sentence_tokens) else set(T.content_words(index.sentences[j]))
        shared = claim_words & words
        # Of the same thing: most of the claim's words are in the sentence, or most of the sentence's in the claim
        # ("It has an automatic shut-off." for "The K2 does not have an automatic shut-off.").
        overlap = max(len(shared) / len(claim_words), len(shared) / max(1, len(words)) if len(shared) >= 2 else 0.0)
        if overlap >= SAME_TOPIC:
            about.append((-overlap, rank, j, shared))
    for _, _, j, shared in sorted(about):
        sentence = index.sentences[j]
        found = _conflict_words(claim, sentence, index)
        if found is None and shared == claim_words:
            found = ("restated", sorted(shared))
        if found is not None:
            kind, words_ = found
            return Conflict(where[j], sentence, quote(sentence, words_), kind)
    return None


def candidates(claim: str, best_sentence: str | None, index: ContextIndex, k: int = 3) -> list[int]:
    """The context sentences a claim is about, best first: the feature model's best, then the most similar."""
    similarities = lexical_similarities(set(T.content_words(claim)), index.sentence_tokens)
    picked = [int(j) for j in np.argsort(-similarities, kind="stable")[:k] if similarities[j] > 0]
    if best_sentence is not None and best_sentence in index.sentences:
        best = index.sentences.index(best_sentence)
        picked = [best] + [j for j in picked if j != best]
    return picked


def claim_conflict(claim: str, best_sentence: str | None, index: ContextIndex) -> Conflict | None:
    """The context sentence of ``index`` that contradicts ``claim``, if one does (see the module docstring)."""
    if not index.sentences:
        return None
    return find_conflict(claim, index, candidates(claim, best_sentence, index))
