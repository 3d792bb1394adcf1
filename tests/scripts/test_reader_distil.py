"""``scripts/reader_distil.py --teacher-model``: a pretrained NLI classifier as the reader's teacher (issue 31's way
on once such weights are to hand). Tiny random models stand in for the real ones; what is checked is the reading:
which class, which order of the pair, which probability the student learns from. Needs the ``train`` extra (torch,
transformers), so it skips where that is not installed (CI installs only ``dev``)."""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from tests.support.scripts import load_script  # noqa: E402

distil = load_script("reader_distil")
packing = load_script("train_reader")  # the pack's weight format

LABELS = {0: "contradiction", 1: "entailment", 2: "neutral"}
PAIRS = [
    {"a": "the kettle has an automatic shut-off", "b": "it has an automatic shut-off", "label": 1, "kind": "nli"},
    {"a": "the kettle does not have an automatic shut-off", "b": "it has an automatic shut-off", "label": 0},
    {"a": "the warranty runs two years", "b": "a warranty of two years covers parts", "label": 1},
    {"a": "the warranty runs five years", "b": "a warranty of two years covers parts", "label": 0},
    {"a": "it holds two litres", "b": "the kettle holds two litres of water", "label": 1},
    {"a": "it holds five litres", "b": "the kettle holds two litres of water", "label": 0},
]
PAIRS = [{"kind": "nli", **p} for p in PAIRS]


def _tokenizer() -> Any:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from tokenizers.processors import TemplateProcessing

    words = sorted({w for p in PAIRS for w in (p["a"] + " " + p["b"]).split()} | {"."})
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *words])}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    return tok


def _config(**kw: Any) -> Any:
    size = _tokenizer().get_vocab_size()
    return transformers.BertConfig(
        vocab_size=size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, **kw
    )


@pytest.fixture
def teacher_dir(tmp_path: Path) -> Path:
    torch.manual_seed(1)
    # weights drawn wide (BERT's 0.02 gives each pair nearly a third for every class): the pair's order must tell
    config = _config(num_labels=3, id2label=LABELS, label2id={v: k for k, v in LABELS.items()}, initializer_range=0.5)
    folder = tmp_path / "teacher"
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    _tokenizer().save(str(folder / "tokenizer.json"))
    return folder


@pytest.fixture
def pack(tmp_path: Path) -> Path:
    """What ``train_reader.py pack`` writes, at toy size: config, weights (word embeddings int8 per row), pairs."""
    folder = tmp_path / "pack"
    folder.mkdir()
    config = _config()
    config.to_json_file(str(folder / "config.json"))
    weights = packing.travelling_weights(transformers.BertModel(config, add_pooling_layer=False).state_dict())
    torch.save(weights, folder / "weights.pt")
    _tokenizer().save(str(folder / "tokenizer.json"))
    for name in ("train.jsonl.gz", "calib.jsonl.gz"):
        with gzip.open(folder / name, "wt") as fh:
            fh.writelines(json.dumps(p) + "\n" for p in PAIRS)
    return folder


def _entailment_p(folder: Path, premise_first: bool) -> np.ndarray:
    """The teacher's softmax probability of entailment for each pair, computed straight from transformers."""
    model = transformers.BertForSequenceClassification.from_pretrained(folder).eval()
    tok = _tokenizer()
    out = []
    with torch.no_grad():
        for p in PAIRS:
            first, second = (p["b"], p["a"]) if premise_first else (p["a"], p["b"])
            enc = tok.encode(first, second)
            logits = model(
                input_ids=torch.tensor([enc.ids]), token_type_ids=torch.tensor([enc.type_ids])
            ).logits.softmax(-1)
            out.append(float(logits[0, 1]))
    return np.asarray(out, dtype=np.float32)


def test_the_entailment_class_is_found_by_name_or_refused_with_the_names() -> None:
    assert distil.entailment_index(_config(id2label=LABELS), "entail") == 1
    assert distil.entailment_index(_config(id2label={0: "ENTAILMENT", 1: "NOT_ENTAILMENT"}), "entail") == 0
    with pytest.raises(SystemExit, match="contradiction"):
        distil.entailment_index(_config(id2label={0: "contradiction", 1: "neutral"}), "entail")
    with pytest.raises(SystemExit):  # "entail" would name both
        distil.entailment_index(_config(id2label={0: "entailment", 1: "entailed_partly"}), "entail")


def test_the_teacher_logit_is_the_log_odds_of_entailment(teacher_dir: Path) -> None:
    model = transformers.BertForSequenceClassification.from_pretrained(teacher_dir).eval()
    teacher = distil.NliTeacher(model, 1)
    ids = torch.randint(4, _tokenizer().get_vocab_size(), (5, 9))
    mask, types = torch.ones_like(ids), torch.zeros_like(ids)
    with torch.no_grad():
        p = torch.sigmoid(teacher(ids, mask, types))
        softmax = model(input_ids=ids, attention_mask=mask, token_type_ids=types).logits.softmax(-1)[:, 1]
    assert torch.allclose(p, softmax, atol=1e-5)


def test_the_student_learns_half_the_label_and_half_the_teachers_entailment_with_the_evidence_first(
    teacher_dir: Path, tmp_path: Path
) -> None:
    tok = _tokenizer()
    student_data = distil.Encoded(tok, PAIRS, 64)
    args = argparse.Namespace(
        teacher_model=teacher_dir,
        teacher_label="entail",
        teacher_max_tokens=64,
        teacher_epochs=0,  # as it comes: its P is the pretrained model's
        teacher_seconds=1e9,
        teacher_lr=1e-5,
        batch=8,
        distil=0.5,
        device="cpu",
    )
    report: dict[str, Any] = {}
    distil.distil_from_model(args, report, PAIRS, PAIRS, student_data)
    premise_first = _entailment_p(teacher_dir, premise_first=True)
    assert not np.allclose(premise_first, _entailment_p(teacher_dir, premise_first=False), atol=1e-3)
    labels = np.asarray([p["label"] for p in PAIRS], dtype=np.float32)
    np.testing.assert_allclose(student_data.soft, 0.5 * labels + 0.5 * premise_first, atol=1e-4)
    assert report["teacher"]["model"] == str(teacher_dir) and report["teacher"]["entailment"] == "entailment"
    assert report["teacher"]["calibration"]["all"]["n"] == len(PAIRS)


def test_a_run_with_an_outside_teacher_fine_tunes_it_and_writes_the_student(
    pack: Path, teacher_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    options = ["--teacher-epochs", "1", "--student-epochs", "1", "--batch", "2", "--student-layers", "1"]
    code = distil.main(
        ["--pack", str(pack), "--out", str(out), "--device", "cpu", "--teacher-model", str(teacher_dir)] + options
    )
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["teacher"]["model"] == str(teacher_dir) and report["teacher"]["steps"] == 3  # 6 pairs, batches of 2
    assert report["student"]["layers"] == 1 and report["pieces"] and (out / report["pieces"][0]).exists()
