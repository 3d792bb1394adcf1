#!/usr/bin/env python3
"""Train the claim reader on an accelerator: a 6-layer teacher, then the shipped 3-layer reader distilled from it.

Issue 31 asks for a reader that reads "not", numbers and opposites; a three-layer model fitted for one CPU epoch
(25 minutes on 2 cores) reads little beyond "not" and digits. Where a GPU is lent, this script trains the full
six layers of all-MiniLM-L6-v2 as a teacher for several epochs, then the first three layers as the student on the
labels and the teacher's probabilities (half each: binary cross-entropy is linear in the target, so this is
Hinton-style distillation at temperature 1). It runs anywhere torch does (``--device cpu`` for a smoke run).

It needs only torch, numpy, tokenizers and transformers (a GPU machine's image has them; the collector's code is
not imported). Its input is the folder ``scripts/train_reader.py pack`` writes: ``config.json``, ``weights.pt``
(the pretrained weights; word embeddings int8 per row, the rest fp16, to travel small), ``train.jsonl.gz``,
``calib.jsonl.gz`` and the judge's tokenizer. Its output: ``student.pt.000``... (the student's fp16 state dict
in pieces under 16 MB; ``train_reader.py unpack`` joins them into ``reader.pt``) and ``report.json`` (the
training record and both models' figures on the calibration pairs, which neither trained on).

    python3 scripts/reader_distil.py --pack .gpu --out OUT --device cuda

``--teacher-model DIR`` takes the teacher from outside instead: a classifier pretrained for entailment (a
transformers folder with ``config.json``, its weights and ``tokenizer.json``, e.g. an MNLI cross-encoder), read as
the log-odds of its entailment class over the pair (evidence as premise, claim as hypothesis, its own tokenizer),
fine-tuned on the pack's pairs for ``--teacher-epochs`` (0: as it comes), and distilled into the same student. The
student and the teacher need not share a tokenizer: distillation only needs each pair's P.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pair_classifier import PairClassifier

PIECE_BYTES = 15_000_000


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as fh:
        return [json.loads(line) for line in fh]


def pretrained_state(pack: Path) -> dict[str, torch.Tensor]:
    raw = torch.load(pack / "weights.pt", map_location="cpu")
    state: dict[str, torch.Tensor] = {}
    for name, value in raw.items():
        if isinstance(value, dict):  # int8 rows and their scales
            state[name] = value["q"].float() * value["scale"].float().unsqueeze(1)
        else:
            state[name] = value.float()
    return state


def build(pack: Path, layers: int, state: dict[str, torch.Tensor]) -> PairClassifier:
    from transformers import BertConfig, BertModel

    config = BertConfig.from_json_file(str(pack / "config.json"))
    config.num_hidden_layers = layers
    encoder = BertModel(config, add_pooling_layer=False)
    wanted = encoder.state_dict()
    kept = {k: v for k, v in state.items() if k in wanted and v.shape == wanted[k].shape}
    missing = [k for k in wanted if k not in kept and not k.endswith("position_ids")]
    if missing:
        raise SystemExit(f"pretrained weights lack {missing[:5]}")
    encoder.load_state_dict(kept, strict=False)
    torch.manual_seed(0)
    return PairClassifier(encoder)


class NliTeacher(torch.nn.Module):
    """A pretrained NLI classifier read as one logit, the log-odds of its entailment class against all the others,
    so that it trains (binary cross-entropy on supported / not) and predicts as a :class:`PairClassifier` does:
    its sigmoid is the classifier's softmax probability of entailment."""

    def __init__(self, model: Any, entailment: int) -> None:
        super().__init__()
        self.model = model
        self.entailment = entailment
        self.uses_types = getattr(model.config, "type_vocab_size", 0) > 1  # RoBERTa has one type, DeBERTa-v3 none

    def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
        logits = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids if self.uses_types else None,
        ).logits.float()
        e = self.entailment
        others = torch.cat([logits[:, :e], logits[:, e + 1 :]], dim=1)
        return logits[:, e] - torch.logsumexp(others, dim=1)


def entailment_index(config: Any, label: str) -> int:
    """The index of the class whose name starts with ``label`` (case aside) in the model's ``id2label``."""
    names = {int(i): str(name) for i, name in config.id2label.items()}
    found = [i for i, name in names.items() if name.lower().startswith(label.lower())]
    if len(names) < 2 or len(found) != 1:
        raise SystemExit(f"--teacher-label {label!r} names no single class among {sorted(names.items())}")
    return found[0]


class Encoded:
    """Pairs tokenized once (cut at ``max_tokens``, as the judge cuts them), batched by like length."""

    def __init__(self, tokenizer: Any, pairs: list[dict], max_tokens: int, premise_first: bool = False) -> None:
        """``premise_first``: the evidence first and the claim second, as an NLI model reads a pair (premise,
        hypothesis); the reader reads the claim first."""
        tokenizer.enable_truncation(max_length=max_tokens)
        tokenizer.no_padding()
        order = [((p["b"] or "."), p["a"]) if premise_first else (p["a"], p["b"] or ".") for p in pairs]
        enc = tokenizer.encode_batch(order)
        self.ids = [e.ids for e in enc]
        self.types = [e.type_ids for e in enc]
        self.labels = np.asarray([float(p["label"]) for p in pairs], dtype=np.float32)
        self.soft = self.labels.copy()

    def __len__(self) -> int:
        return len(self.ids)

    def batches(self, size: int, seed: int | None) -> list[list[int]]:
        order = list(range(len(self)))
        if seed is None:
            order.sort(key=lambda i: len(self.ids[i]))
            return [order[s : s + size] for s in range(0, len(order), size)]
        rng = random.Random(seed)
        rng.shuffle(order)
        out: list[list[int]] = []
        for run in range(0, len(order), 50 * size):
            part = sorted(order[run : run + 50 * size], key=lambda i: len(self.ids[i]))
            out += [part[s : s + size] for s in range(0, len(part), size)]
        rng.shuffle(out)
        return out

    def tensors(self, members: list[int], device: str) -> tuple[torch.Tensor, ...]:
        width = max(len(self.ids[i]) for i in members)
        ids = torch.zeros((len(members), width), dtype=torch.long)
        types = torch.zeros_like(ids)
        mask = torch.zeros_like(ids)
        for r, i in enumerate(members):
            n = len(self.ids[i])
            ids[r, :n] = torch.tensor(self.ids[i])
            types[r, :n] = torch.tensor(self.types[i])
            mask[r, :n] = 1
        target = torch.tensor(self.soft[members])
        return tuple(t.to(device, non_blocking=True) for t in (ids, mask, types, target))


def fit(
    model: torch.nn.Module,
    data: Encoded,
    *,
    seconds: float,
    max_epochs: int,
    batch: int,
    lr: float,
    device: str,
    name: str,
) -> dict[str, Any]:
    """AdamW, warm-up over the first 6% then linear decay, gradients clipped at 1, bf16 autocast on a GPU. The
    number of epochs is the most that fits ``seconds`` (timed on steps 10 to 40), at most ``max_epochs``."""
    model.to(device).train()
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    per_epoch = math.ceil(len(data) / batch)
    epochs, total = max_epochs, max_epochs * per_epoch
    loss_fn = torch.nn.BCEWithLogitsLoss()
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16)
        if device.startswith("cuda")
        else torch.autocast("cpu", enabled=False)
    )
    start, step, losses = time.time(), 0, []
    for epoch in range(max_epochs):
        if epoch >= epochs:
            break
        running, count = torch.zeros((), device=device), 0
        for members in data.batches(batch, seed=epoch):
            warm = max(1, total * 6 // 100)
            factor = min((step + 1) / warm, max(0.0, (total - step) / max(1, total - warm)))
            for group in optimiser.param_groups:
                group["lr"] = lr * factor
            ids, mask, types, target = data.tensors(members, device)
            with autocast:
                logits = model(ids, mask, types)
            loss = loss_fn(logits.float(), target)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimiser.step()
            optimiser.zero_grad(set_to_none=True)
            step += 1
            running += loss.detach()
            count += 1
            if step == 10:
                timed = time.time()
            if step == 40:  # timed after 10 steps: the first ones pay for the accelerator's warm-up
                per_step = (time.time() - timed) / 30
                epochs = max(1, min(max_epochs, int(seconds / (per_step * per_epoch))))
                total = epochs * per_epoch
                print(f"{name}: {per_step * 1000:.1f} ms a step, {epochs} epochs of {per_epoch} steps", flush=True)
        mean = running.item() / max(1, count)
        losses.append(round(mean, 4))
        print(f"{name}: epoch {epoch} loss {mean:.4f} ({time.time() - start:.0f}s)", flush=True)
    model.eval()
    return {
        "epochs": epochs,
        "steps": step,
        "batch": batch,
        "lr": lr,
        "seconds": round(time.time() - start, 1),
        "loss": losses,
    }


@torch.no_grad()
def predict(model: torch.nn.Module, data: Encoded, device: str, batch: int = 512) -> np.ndarray:
    model.to(device).eval()
    out = np.zeros(len(data), dtype=np.float32)
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16)
        if device.startswith("cuda")
        else torch.autocast("cpu", enabled=False)
    )
    for members in data.batches(batch, seed=None):
        ids, mask, types, _ = data.tensors(members, device)
        with autocast:
            out[members] = torch.sigmoid(model(ids, mask, types).float()).cpu().numpy()
    return out


def auroc(y: np.ndarray, score: np.ndarray) -> float:
    order = np.argsort(score, kind="mergesort")
    ranks = np.empty(len(score))
    ranks[order] = np.arange(1, len(score) + 1)
    pos = y == 1
    n1, n0 = int(pos.sum()), int((~pos).sum())
    if not n1 or not n0:
        return float("nan")
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def figures(pairs: list[dict], p: np.ndarray) -> dict[str, Any]:
    """Per kind: balanced accuracy of P(supported) < 0.5 ⇒ unsupported, and the AUROC of 1 − P for unsupported."""
    out: dict[str, Any] = {}
    kinds = sorted({q["kind"] for q in pairs})
    for kind in ["all", *kinds]:
        keep = np.asarray([kind == "all" or q["kind"] == kind for q in pairs])
        y = np.asarray([1 - int(q["label"]) for q in pairs])[keep]
        flag = (p[keep] < 0.5).astype(int)
        tpr = flag[y == 1].mean() if (y == 1).any() else float("nan")
        tnr = 1 - flag[y == 0].mean() if (y == 0).any() else float("nan")
        out[kind] = {
            "n": int(keep.sum()),
            "bacc": round(100 * (tpr + tnr) / 2, 2),
            "auroc": round(auroc(y, 1 - p[keep]), 4),
        }
    return out


def save_pieces(model: PairClassifier, out: Path, stem: str) -> list[str]:
    buffer = io.BytesIO()
    torch.save({k: v.detach().to("cpu", torch.float16) for k, v in model.state_dict().items()}, buffer)
    blob = buffer.getvalue()
    names = []
    for k, s in enumerate(range(0, len(blob), PIECE_BYTES)):
        name = f"{stem}.pt.{k:03d}"
        (out / name).write_bytes(blob[s : s + PIECE_BYTES])
        names.append(name)
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pack", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--teacher-layers", type=int, default=6)
    parser.add_argument("--student-layers", type=int, default=3)
    parser.add_argument("--teacher-seconds", type=float, default=150)
    parser.add_argument("--student-seconds", type=float, default=150)
    parser.add_argument("--teacher-epochs", type=int, default=4)
    parser.add_argument("--student-epochs", type=int, default=6)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--teacher-lr", type=float, default=8e-5)
    parser.add_argument("--student-lr", type=float, default=1.5e-4)
    parser.add_argument("--distil", type=float, default=0.5, help="the teacher's share of the student's target")
    parser.add_argument(
        "--teacher-model", type=Path, help="a pretrained NLI classifier's folder as the teacher (see the docstring)"
    )
    parser.add_argument("--teacher-label", default="entail", help="how the outside teacher's entailment class starts")
    parser.add_argument("--teacher-max-tokens", type=int, default=128, help="the outside teacher's cut")
    parser.add_argument("--limit", type=int, default=0, help="smoke runs: the first N pairs of each file")
    parser.add_argument(
        "--student-init", type=Path, help="start the student from an earlier run's output folder (report.json, pieces)"
    )
    args = parser.parse_args(argv)
    from tokenizers import Tokenizer

    started = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    if args.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
    tokenizer = Tokenizer.from_file(str(args.pack / "tokenizer.json"))
    train_pairs = read_jsonl(args.pack / "train.jsonl.gz")
    calib_pairs = read_jsonl(args.pack / "calib.jsonl.gz")
    if args.limit:
        train_pairs, calib_pairs = train_pairs[: args.limit], calib_pairs[: args.limit]
    train = Encoded(tokenizer, train_pairs, args.max_tokens)
    calib = Encoded(tokenizer, calib_pairs, args.max_tokens)
    print(f"{len(train)} training pairs, {len(calib)} calibration pairs ({time.time() - started:.0f}s)", flush=True)
    state = pretrained_state(args.pack)
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "versions": {"torch": torch.__version__},
        "training_pairs": len(train),
        "calibration_pairs": len(calib),
        "max_tokens": args.max_tokens,
        "distil": args.distil,
    }

    if args.teacher_model:
        distil_from_model(args, report, train_pairs, calib_pairs, train)
    elif args.teacher_layers:
        distil(args, report, state, train, calib_pairs, calib)
    student = build(args.pack, args.student_layers, state)
    if args.student_init:  # another epoch of an earlier student, on labels alone (say, on new kinds of edits)
        earlier = json.loads((args.student_init / "report.json").read_text())
        blob = b"".join((args.student_init / name).read_bytes() for name in earlier["pieces"])
        student.load_state_dict({k: v.float() for k, v in torch.load(io.BytesIO(blob)).items()})
        report["student_init"] = {"from": str(args.student_init), "teacher": earlier.get("teacher")}
    report["student"] = {"layers": args.student_layers} | fit_and_score(
        args, "student", student, train, calib_pairs, calib
    )
    report["pieces"] = save_pieces(student, args.out, "student")
    report["seconds"] = round(time.time() - started, 1)
    (args.out / "report.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1), flush=True)
    return 0


def fit_and_score(
    args: argparse.Namespace, role: str, model: torch.nn.Module, train: Encoded, calib_pairs: list[dict], calib: Encoded
) -> dict[str, Any]:
    """Fit the teacher or the student with its own ``--<role>-*`` options (``--teacher-epochs 0``: not at all); its
    record with its calibration figures."""
    options = vars(args)
    record = fit(
        model,
        train,
        seconds=options[f"{role}_seconds"],
        max_epochs=options[f"{role}_epochs"],
        batch=args.batch,
        lr=options[f"{role}_lr"],
        device=args.device,
        name=role,
    )
    record["calibration"] = figures(calib_pairs, predict(model, calib, args.device))
    print(json.dumps(record["calibration"]["all"]), flush=True)
    return record


def learn_from(args: argparse.Namespace, train: Encoded, p_teacher: np.ndarray) -> float:
    """Set the student's targets, ``--distil`` of the teacher's P and the rest the label; how often the two agree."""
    train.soft = ((1 - args.distil) * train.labels + args.distil * p_teacher).astype(np.float32)
    return round(float(((p_teacher >= 0.5) == (train.labels >= 0.5)).mean()), 4)


def distil(
    args: argparse.Namespace,
    report: dict[str, Any],
    state: dict[str, torch.Tensor],
    train: Encoded,
    calib_pairs: list[dict],
    calib: Encoded,
) -> None:
    """Train the teacher, then set the student's targets from it."""
    teacher = build(args.pack, args.teacher_layers, state)
    report["teacher"] = {"layers": args.teacher_layers} | fit_and_score(
        args, "teacher", teacher, train, calib_pairs, calib
    )
    report["teacher"]["train_agreement"] = learn_from(args, train, predict(teacher, train, args.device))
    teacher.to("cpu")


def distil_from_model(
    args: argparse.Namespace, report: dict[str, Any], train_pairs: list[dict], calib_pairs: list[dict], train: Encoded
) -> None:
    """The outside teacher (``--teacher-model``), fine-tuned for ``--teacher-epochs`` (0: read as it comes) on its
    own tokenization of the pairs; then the student's targets, as :func:`distil` sets them."""
    from tokenizers import Tokenizer
    from transformers import AutoModelForSequenceClassification

    folder: Path = args.teacher_model
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    own_train = Encoded(tokenizer, train_pairs, args.teacher_max_tokens, premise_first=True)
    own_calib = Encoded(tokenizer, calib_pairs, args.teacher_max_tokens, premise_first=True)
    model = AutoModelForSequenceClassification.from_pretrained(str(folder))
    entailment = entailment_index(model.config, args.teacher_label)
    teacher = NliTeacher(model, entailment)
    report["teacher"] = {"model": str(folder), "entailment": model.config.id2label[entailment]} | fit_and_score(
        args, "teacher", teacher, own_train, calib_pairs, own_calib
    )
    report["teacher"]["train_agreement"] = learn_from(args, train, predict(teacher, own_train, args.device))
    teacher.to("cpu")


if __name__ == "__main__":
    sys.exit(main())
