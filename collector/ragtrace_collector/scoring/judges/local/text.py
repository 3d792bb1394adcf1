"""Text handling for the local judge: sentences, claims, content words, numbers, names, negation.

Everything here is rule-based and deterministic. Sentences come from ``pysbd``; a claim is a
sentence, or one half of a compound sentence (split at ``;`` and at ``, and``/``, but``... when
both halves are clauses of their own). Claims keep their character offsets in the response so
training can label them from RAGTruth's hallucinated spans.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache

from ragtrace_collector.scoring.text import Segmenter

_segmenter_lock = threading.Lock()
_segmenter = Segmenter(language="en", clean=False, char_span=True)
_split_cache: OrderedDict[str, tuple[tuple[str, int, int], ...]] = OrderedDict()
_SPLIT_CACHE_SIZE = 4096

STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "aren't",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "cannot",
        "could",
        "couldn't",
        "did",
        "didn't",
        "do",
        "does",
        "doesn't",
        "doing",
        "don't",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "hadn't",
        "has",
        "hasn't",
        "have",
        "haven't",
        "having",
        "he",
        "he'd",
        "he'll",
        "he's",
        "her",
        "here",
        "here's",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "how's",
        "i",
        "i'd",
        "i'll",
        "i'm",
        "i've",
        "if",
        "in",
        "into",
        "is",
        "isn't",
        "it",
        "it's",
        "its",
        "itself",
        "let's",
        "me",
        "more",
        "most",
        "mustn't",
        "my",
        "myself",
        "nor",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "ought",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "shan't",
        "she",
        "she'd",
        "she'll",
        "she's",
        "should",
        "shouldn't",
        "so",
        "some",
        "such",
        "than",
        "that",
        "that's",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "there's",
        "these",
        "they",
        "they'd",
        "they'll",
        "they're",
        "they've",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "wasn't",
        "we",
        "we'd",
        "we'll",
        "we're",
        "we've",
        "were",
        "weren't",
        "what",
        "what's",
        "when",
        "when's",
        "where",
        "where's",
        "which",
        "while",
        "who",
        "who's",
        "whom",
        "why",
        "why's",
        "with",
        "won't",
        "would",
        "wouldn't",
        "you",
        "you'd",
        "you'll",
        "you're",
        "you've",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "may",
        "might",
        "will",
        "shall",
        "must",
        "can",
        "just",
        "etc",
        "however",
        "therefore",
        "thus",
        "also",
        "additionally",
        "furthermore",
        "overall",
        "generally",
        "typically",
        "usually",
        "often",
        "well",
        "one",
        "based",
        "provided",
        "passage",
        "passages",
        "according",
        "mentioned",
        "given",
        "information",
        "context",
        "contexts",
        "answer",
        "question",
        "sure",
        "thanks",
        "thank",
        "hello",
        "hi",
        "ok",
        "okay",
        "yes",
    ]
)
NEGATIONS = frozenset(["not", "no", "never", "none", "nor", "neither", "cannot", "n't", "without"])
_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*|\d+(?:[.,]\d+)*")
_NUMBER = re.compile(r"(?<![\w.])\$?\d+(?:,\d{3})*(?:\.\d+)?%?")
_NUMBER_WORDS = {
    "zero": "0",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
    "eleven": "11",
    "twelve": "12",
    "fifteen": "15",
    "twenty": "20",
    "thirty": "30",
    "forty": "40",
    "fifty": "50",
    "hundred": "100",
    "thousand": "1000",
    "million": "1000000",
    "billion": "1000000000",
    "dozen": "12",
}
# The last word of a compound number ("twenty-one"), and what a hyphen after a number word may join that is not a
# count of it: "two-thirds" is no 2.
_DIGIT_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}
_TENS = frozenset(["twenty", "thirty", "forty", "fifty"])
_FRACTIONS = frozenset(
    [
        "half",
        "halves",
        "third",
        "thirds",
        "quarter",
        "quarters",
        "fourth",
        "fourths",
        "fifth",
        "fifths",
        "tenth",
        "tenths",
    ]
)
_MONTH = re.compile(
    r"\b(Jan(?:uary)?|Feb(?:ruary)?|March|Mar\.|April|Apr\.|May|June|July|Aug(?:ust)?|Sept?(?:ember)?|"
    r"Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\b"
)
# "passage 3", "passages 1 and 2", "step 4": numbers that refer to the prompt, not to facts.
_REFERENCE_NUMBERS = re.compile(
    r"\b(?:passages?|contexts?|documents?|sources?|steps?|options?|points?|paragraphs?)\s+\d+"
    r"(?:\s*(?:,|and|&|or|-|–|to)\s*\d+)*",
    re.I,
)
# "400°F (200°C)": a unit conversion the writer computed, not a fact to find in the contexts.
_CONVERSION = re.compile(
    r"\(\s*(?:about\s+|approximately\s+|~)?\d+(?:\.\d+)?\s*(?:°\s*[CF]|degrees\s+\w+|[a-zA-Z]{1,3})\s*\)"
)
_CAPITALISED = re.compile(r"\b[A-Z][a-zA-Z'\-]+(?:\s+(?:of|the|de|and|&)?\s*[A-Z][a-zA-Z'\-]+)*")
_LIST_MARKER = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s+")
_COMPOUND = re.compile(r";\s+|,\s+(?:and|but|while|whereas|although|though|so)\s+|\s+(?:but|whereas)\s+")


@dataclass(frozen=True)
class Span:
    """A piece of a text with its character offsets."""

    text: str
    start: int
    end: int


def sentences(text: str) -> list[Span]:
    """Sentences of ``text`` (pysbd, per line so list items stay apart), stripped, with offsets."""
    if not text:
        return []
    with _segmenter_lock:
        cached = _split_cache.get(text)
        if cached is not None:
            _split_cache.move_to_end(text)
            return [Span(*s) for s in cached]
    found: list[tuple[str, int, int]] = []
    offset = 0
    for line in text.split("\n"):
        if line.strip():
            with _segmenter_lock:
                pieces = _segmenter.segment(line)
            for piece in pieces:
                raw = piece.sent
                stripped = raw.strip()
                if not stripped:
                    continue
                start = offset + piece.start + (len(raw) - len(raw.lstrip()))
                found.append((stripped, start, start + len(stripped)))
        offset += len(line) + 1
    with _segmenter_lock:
        _split_cache[text] = tuple(found)
        while len(_split_cache) > _SPLIT_CACHE_SIZE:
            _split_cache.popitem(last=False)
    return [Span(*s) for s in found]


def clear_cache() -> None:
    """Forget the cached sentence splits (see :func:`sentences`)."""
    with _segmenter_lock:
        _split_cache.clear()


def _is_clause(text: str) -> bool:
    return len(content_words(text)) >= 2 and len(text.split()) >= 4


def split_compound(sentence: Span) -> list[Span]:
    """Split a compound sentence where both sides are clauses of their own (≥4 words, ≥2 content)."""
    parts: list[Span] = []
    last = 0
    text = sentence.text
    for match in _COMPOUND.finditer(text):
        left = text[last : match.start()]
        right = text[match.end() :]
        if _is_clause(left) and _is_clause(right):
            parts.append(Span(left.strip(), sentence.start + last, sentence.start + match.start()))
            last = match.end()
    tail = text[last:]
    parts.append(Span(tail.strip(), sentence.start + last, sentence.end))
    return [p for p in parts if p.text]


def claims(response: str) -> list[Span]:
    """The response's claims: sentences with content words, compound ones split, list markers dropped."""
    out: list[Span] = []
    for sent in sentences(response):
        marker = _LIST_MARKER.match(sent.text)
        if marker:
            sent = Span(sent.text[marker.end() :], sent.start + marker.end(), sent.end)
        if not content_words(sent.text):
            continue
        out.extend(p for p in split_compound(sent) if content_words(p.text))
    return out


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A crude suffix stripper: enough to match 'cleaning'/'cleaned'/'cleans' to 'clean'."""
    w = word.lower().replace("'s", "")
    for suffix in ("ingly", "edly", "ies", "ing", "ed", "es", "ly", "s"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w = w[: -len(suffix)]
            if suffix == "ies":
                w += "y"
            break
    return w


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


_ACRONYM = re.compile(r"\b[A-Z](?:[.&][A-Z])+\b\.?")


def content_words(text: str) -> list[str]:
    """Lower-cased, stemmed words that carry content (stopwords dropped; 'F.E.A.R.' → 'fear')."""
    acronyms = [re.sub(r"[^A-Za-z]", "", m.group()).lower() for m in _ACRONYM.finditer(text)]
    if acronyms:
        text = _ACRONYM.sub(" ", text)
    return [stem(w) for w in _numbers_apart(words(text)) if w not in STOPWORDS and len(w) > 1] + acronyms


def _numbers_apart(found: list[str]) -> list[str]:
    """A number word's compound counts as its rest, as a figure's does: "five-year" is "year" like "5-year" (the
    number is :func:`numbers`'), so "a five-year warranty" is about the "warranty for two years"."""
    out = []
    for w in found:
        if "-" in w:
            compound = _number_compound(w)
            if compound is not None:
                if compound[1]:
                    out.append(compound[1])
                continue
        out.append(w)
    return out


def _normalise_number(raw: str) -> str:
    value = raw.replace("$", "").replace(",", "").rstrip("%")
    try:
        number = float(value)
    except ValueError:
        return value
    return str(int(number)) if number.is_integer() else repr(number)


def _number_compound(word: str) -> tuple[str, str] | None:
    """A hyphenated word that starts with a number word, as (the number, the rest): "five-year" ("5", "year"),
    "twenty-one" ("21", ""), "twenty-five-year" ("25", "year"); None for fractions ("two-thirds") and "one-off"."""
    parts = word.split("-")
    head = parts[0]
    if head not in _NUMBER_WORDS:
        return None
    value, rest = int(_NUMBER_WORDS[head]), parts[1:]
    if head in _TENS and rest and rest[0] in _DIGIT_WORDS:
        value, rest = value + _DIGIT_WORDS[rest[0]], rest[1:]
    tail = "-".join(rest)
    if tail in _FRACTIONS or tail.startswith(("half", "third", "quarter")):
        return None
    return str(value), tail


def numbers(text: str) -> set[str]:
    """Numbers in ``text`` normalised ('1,000' → '1000', '5.0' → '5', 'twelve' → '12')."""
    text = _CONVERSION.sub(" ", _REFERENCE_NUMBERS.sub(" ", text))
    found = {_normalise_number(m.group()) for m in _NUMBER.finditer(text)}
    for w in words(text):
        if w in _NUMBER_WORDS:
            found.add(_NUMBER_WORDS[w])
        elif "-" in w:
            compound = _number_compound(w)
            if compound is not None:
                found.add(compound[0])
    found.discard("")
    return found


def months(text: str) -> set[str]:
    """Month names (capitalised, so the verb 'may' and 'march' are not dates), as 3-letter keys."""
    return {m.group()[:3].lower() for m in _MONTH.finditer(text)}


def capitalised_spans(text: str) -> list[str]:
    """Runs of capitalised words not at a sentence start: a cheap stand-in for named entities."""
    spans: list[str] = []
    for match in _CAPITALISED.finditer(text):
        start = match.start()
        before = text[:start].rstrip()
        if not before or before[-1] in ".!?:\n\"'(" or _LIST_MARKER.match(text[: start + 1] or ""):
            # Sentence-initial: a single capitalised word is usually just the sentence's first
            # word; keep it only when the "sentence" is a short answer-like phrase ("Delhi").
            rest = text[match.end() :].split(".")[0]
            if " " not in match.group().strip() and len(rest.split()) > 2:
                continue
        span = match.group().strip()
        # "In March", "The Eiffel Tower": drop a leading function word.
        head, _, rest = span.partition(" ")
        if rest and head.lower() in STOPWORDS:
            span = rest.strip()
        if span.lower() in STOPWORDS or not span[:1].isupper():
            continue
        spans.append(span)
    return spans


def negated(text: str) -> bool:
    lowered = text.lower()
    return any(w in NEGATIONS for w in words(lowered)) or "n't" in lowered


def entities(text: str) -> list[str]:
    """Names (capitalised spans), numbers and dates in ``text``, deduplicated in order of appearance."""
    seen: dict[str, None] = {}
    for span in capitalised_spans(text):
        seen.setdefault(span, None)
    for match in _NUMBER.finditer(text):
        seen.setdefault(match.group(), None)
    return list(seen)
