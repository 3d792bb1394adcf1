"""The claim reader's training script: the parts that decide what it learns and what ships, without torch (the
one-edit contradictions, the questionless pairs, the calibration split, the veto's arithmetic)."""

from __future__ import annotations

import random

import numpy as np

from ragtrace_collector.scoring.judges.local.reader import ReaderParams
from tests.support.scripts import load_script

reader = load_script("train_reader")


def test_negation_is_added_after_the_auxiliary_or_removed() -> None:
    rng = random.Random(0)
    assert reader._negate("The kettle is cordless.", rng) == "The kettle is not cordless."
    assert (
        reader._negate("The kettle has an automatic shut-off.", rng)
        == "The kettle does not have an automatic shut-off."
    )
    assert reader._negate("Tickets are not refundable.", rng) == "Tickets are refundable."
    assert reader._negate("The kettle doesn't whistle.", rng) == "The kettle does whistle."
    assert reader._negate("Blue kettles.", rng) is None  # nothing to negate: no pair made


def test_a_number_or_number_word_is_changed() -> None:
    rng = random.Random(0)
    for claim, old in (("It holds 2 litres.", "2"), ("The warranty lasts two years.", "two")):
        edited = reader._renumber(claim, rng)
        assert edited is not None and edited != claim and old not in edited.split()


def test_roles_are_swapped_between_subject_and_object_or_from_and_to() -> None:
    rng = random.Random(0)
    assert (
        reader._swap_roles("The tenant pays the landlord a deposit.", rng) == "The landlord pays the tenant a deposit."
    )
    assert (
        reader._swap_roles("Orders are shipped from the central warehouse to regional depots.", rng)
        == "Orders are shipped from regional depots to the central warehouse."
    )
    assert reader._swap_roles("A dog chased the cat.", rng) == "The cat chased a dog."
    assert reader._swap_roles("It is sunny.", rng) is None  # no subject and object to swap: no pair made


def test_names_are_swapped_or_replaced_from_the_context() -> None:
    rng = random.Random(3)
    claim = "Acme Corp acquired Brightwave in 2019."
    made = {reader._swap_names(claim, "Acme Corp, Brightwave and Lumen Labs met.", rng) for _ in range(20)}
    assert "Brightwave acquired Acme Corp in 2019." in made  # roles swapped
    assert any(m and "Lumen Labs" in m for m in made)  # another name of the context


def test_contradictions_are_unsupported_one_edit_copies_of_supported_pairs() -> None:
    pairs = [
        {"a": "The kettle has an automatic shut-off.", "b": "It has an automatic shut-off.", "label": 1},
        {"a": "Prices increased in 2020.", "b": "Prices increased in 2020.", "label": 1},
        {"a": "The motor is covered for two years.", "b": "Two years of cover.", "label": 1},
        {"a": "It is sold in Japan.", "b": "Sold in France.", "label": 0},  # unsupported: never a source
    ]
    made = reader.contradictions(pairs, limit=10, seed=0)
    assert len(made) == 3 and all(m["label"] == 0 and m["kind"] == "augmented" for m in made)
    sources = {p["b"]: p["a"] for p in pairs[:3]}
    for m in made:
        assert m["b"] in sources and m["a"] != sources[m["b"]], m
        assert m["source"].startswith("contradiction/")
    assert len(reader.contradictions(pairs, limit=1, seed=0)) == 1


def test_evidence_edits_change_the_context_on_what_the_claim_says() -> None:
    """A context that says "not", another number or the opposite of a claim that does not: the edit touches a word
    or number the claim shares (so it is about the claim), and the claim is kept as it was."""
    pairs = [
        {"a": "The kettle has an automatic shut-off.", "b": "It has an automatic shut-off.", "label": 1},
        {"a": "Prices increased in 2020.", "b": "Prices increased in 2020.", "label": 1},
        {"a": "The cover lasts 2 years.", "b": "Cover lasts 2 years.", "label": 1},
        {"a": "The tank holds water.", "b": "The blue tank holds water.", "label": 1},
    ]
    made = reader.contradictions(pairs, limit=10, seed=0, evidence_share=1.0)
    by_claim = {m["a"]: m for m in made}
    assert set(by_claim) <= {p["a"] for p in pairs} and len(made) >= 3
    assert all(m["label"] == 0 and m["source"].startswith("contradiction/evidence-") for m in made)
    assert by_claim["The kettle has an automatic shut-off."]["b"] == "It does not have an automatic shut-off."
    assert by_claim["Prices increased in 2020."]["b"] != "Prices increased in 2020."
    assert "2 years" not in by_claim["The cover lasts 2 years."]["b"]


def test_the_reader_reads_the_claim_without_its_question() -> None:
    pair = {"a": "It has a timer. (question: Does it have a timer?)", "question": " Does it have a timer? "}
    assert reader.without_question(pair)["a"] == "It has a timer."
    assert reader.without_question({"a": "It has a timer.", "question": ""})["a"] == "It has a timer."


def test_the_support_pairs_calibration_slice_is_stable_and_near_its_share() -> None:
    parts = [reader.support_part(f"row-{i}") for i in range(5000)]
    assert parts == [reader.support_part(f"row-{i}") for i in range(5000)]
    assert 0.06 < parts.count("calib") / len(parts) < 0.10


def test_the_veto_only_takes_support_away() -> None:
    params = ReaderParams("", "", 64, 1, 0.3)
    got = params.overrule(np.asarray([0.9, 0.9, 0.9, 0.1]), np.asarray([0.29, 0.31, 0.01, 0.2]))
    assert got.tolist() == [0.29, 0.9, 0.01, 0.1]
