"""METEOR: the worked example with its arithmetic, agreement with NLTK's implementation, WordNet from the package."""

from __future__ import annotations

import random
import sys

import pytest

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.scoring.engine import evaluate_record
from ragtrace_collector.scoring.metrics.meteor import chunks, meteor, tokenize
from ragtrace_collector.scoring.wordnet import WordNetUnavailable, wordnet

# NLTK's own docstring example (score 0.6944 there): hypothesis 18 tokens, reference 16.
HYP = "It is a guide to action which ensures that the military always obeys the commands of the party"
REF = "It is a guide to action that ensures that the military will forever heed Party commands"


async def test_worked_example_arithmetic() -> None:
    """12 exact matches in 6 chunks: "it is a guide to action" | "ensures that" | "military" | "commands" | "the"
    (the hypothesis's last "the" takes the reference's only one) | "party" (lower-cased "Party").

    P = 12/18, R = 12/16, F_mean = P·R / (0.9·P + 0.1·R) = 0.5 / (0.6 + 0.075) = 0.740741;
    6 chunks: Pen = 0.5 · (6/12)^3 = 0.0625; score = (1 − 0.0625) · 0.740741 = 0.694444.
    """
    [result] = await evaluate_record(RagRecord(response=HYP, reference=REF), ["meteor"], None)  # type: ignore[arg-type]
    assert result.status == "scored", result.reason
    d = result.details
    assert d["matches"] == {"exact": 12, "stem": 0, "synonym": 0}
    assert (d["hypothesis_tokens"], d["reference_tokens"], d["chunks"]) == (18, 16, 6)
    fmean = (12 / 18) * (12 / 16) / (0.9 * 12 / 18 + 0.1 * 12 / 16)
    assert d["fmean"] == pytest.approx(fmean, abs=1e-6)
    assert d["penalty"] == pytest.approx(0.0625)
    assert result.score == pytest.approx((1 - 0.0625) * fmean, abs=1e-9)
    assert round(result.score, 4) == 0.6944
    assert d["stages"] == ["exact", "porter_stem", "wordnet_synonym"]


def test_each_stage_counts() -> None:
    wn = wordnet()
    stem = meteor(["cats", "running"], ["cat", "runs"], wn)
    assert stem["matches"] == {"exact": 0, "stem": 2, "synonym": 0}
    # WordNet: auto ~ car, quick ~ fast (NLTK looks synonyms up on the stems, unchanged here)
    syn = meteor(["auto", "quick"], ["car", "fast"], wn)
    assert syn["matches"] == {"exact": 0, "stem": 0, "synonym": 2}
    # P = R = F_mean = 1; one chunk of 2 matches: Pen = 0.5 · (1/2)^3 = 0.0625
    assert syn["score"] == pytest.approx(0.9375, abs=1e-12)
    none = meteor(["zebra"], ["quantum"], wn)
    assert none["score"] == 0.0 and none["chunks"] == 0


def test_chunks() -> None:
    assert chunks([(0, 0), (1, 1), (2, 2)]) == 1
    assert chunks([(0, 0), (1, 2), (2, 3)]) == 2
    assert chunks([(0, 3), (1, 2), (2, 1)]) == 3


def test_agrees_with_nltk_meteor_score() -> None:
    """The same tokens through ``nltk.translate.meteor_score.single_meteor_score`` (with the same WordNet)."""
    from nltk.translate.meteor_score import single_meteor_score

    wn = wordnet()
    vocab = [
        *("the", "a", "big", "large", "cat", "cats", "dog", "feline", "run", "ran", "running", "runs", "house"),
        *("home", "quick", "fast", "rapid", "car", "automobile", "city", "town", "of", "in", "on", "is", "was"),
        *("be", "obey", "heed", "commands", "party", "military", "guide", "action"),
    ]
    rng = random.Random(15)
    pairs = [(HYP, REF), ("The cat sat on the mat.", "A feline was sitting on the rug.")]
    pairs += [
        (" ".join(rng.choices(vocab, k=rng.randint(1, 16))), " ".join(rng.choices(vocab, k=rng.randint(1, 16))))
        for _ in range(200)
    ]
    for h, r in pairs:
        ht, rt = tokenize(h), tokenize(r)
        assert meteor(ht, rt, wn)["score"] == pytest.approx(single_meteor_score(rt, ht, wordnet=wn), abs=1e-12), (h, r)


def test_wordnet_is_pinned_wordnet_30() -> None:
    wn = wordnet()
    assert wn.get_version() == "3.0"
    assert {lemma.name() for s in wn.synsets("car") for lemma in s.lemmas()} >= {"auto", "automobile"}


async def test_skipped_without_wordnet(monkeypatch: pytest.MonkeyPatch) -> None:
    import ragtrace_collector.scoring.wordnet as w

    def missing() -> None:
        raise WordNetUnavailable("not installed")

    monkeypatch.setattr(w, "wordnet", missing)
    [result] = await evaluate_record(RagRecord(response="a", reference="a"), ["meteor"], None)  # type: ignore[arg-type]
    assert result.status == "skipped" and "WordNet" in (result.reason or "")


def test_altered_wordnet_is_refused(tmp_path) -> None:
    from ragtrace_collector.scoring.wordnet import WORDNET30_SHA256, _read_files, default_wordnet_dir

    src = default_wordnet_dir()
    for name in WORDNET30_SHA256:
        (tmp_path / name).write_bytes((src / name).read_bytes())
    (tmp_path / "adv.exc").write_bytes(b"best well\n")
    with pytest.raises(WordNetUnavailable, match="sha256"):
        _read_files(tmp_path, pinned=True)
    assert _read_files(tmp_path, pinned=False)["adv.exc"] == "best well\n"


async def test_missing_reference_is_skipped() -> None:
    [result] = await evaluate_record(RagRecord(response="a"), ["meteor"], None)  # type: ignore[arg-type]
    assert result.status == "skipped" and result.reason == "missing input: reference"


async def test_concurrent_records_score_as_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Records scored at once (threads) share one WordNet reader: each gets the score it gets alone. A fresh reader
    (no synsets cached yet) so that the concurrent lookups read its files."""
    import asyncio

    import ragtrace_collector.scoring.wordnet as w

    shared = wordnet()
    monkeypatch.setattr(w, "_shared", w._reader_class()(w.default_wordnet_dir(), shared._texts))
    # many distinct words (WordNet's own nouns and verbs), so that the lookups read the files, not the cache
    lemmas = [
        line.split(" ", 1)[0] for name in ("index.noun", "index.verb") for line in shared._texts[name].splitlines()
    ]
    words = [x for x in lemmas if x.isalpha()]
    rng = random.Random(7)
    rows = [(" ".join(rng.choices(words, k=80)), " ".join(rng.choices(words, k=80))) for _ in range(48)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often: an unguarded seek-then-read would interleave
    try:
        results = await asyncio.gather(
            *(evaluate_record(RagRecord(response=h, reference=r), ["meteor"], None) for h, r in rows)  # type: ignore[arg-type]
        )
    finally:
        sys.setswitchinterval(interval)
    alone = [meteor(tokenize(h), tokenize(r), shared)["score"] for h, r in rows]
    assert [res.status for [res] in results] == ["scored"] * len(rows)
    assert [res.score for [res] in results] == pytest.approx(alone, abs=1e-12)
