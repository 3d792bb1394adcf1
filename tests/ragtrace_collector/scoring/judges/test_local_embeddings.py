"""LocalEmbedder: the pinned int8 MiniLM loads offline and embeds sensibly and deterministically."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ragtrace_collector.scoring.embeddings import DIMENSION, EmbeddingModelError, LocalEmbedder
from tests.support.paths import REPO


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder.shared()


def test_loads_and_runs_with_the_network_unavailable(tmp_path: Path) -> None:
    # A fresh interpreter where any socket connection fails and the hub is told to stay offline:
    # the embedder and the judge must still load and score.
    script = textwrap.dedent(
        """
        import asyncio, json, socket
        def refuse(*args, **kwargs):
            raise OSError("network disabled by test")
        socket.socket.connect = refuse
        socket.socket.connect_ex = refuse
        socket.create_connection = refuse
        from ragtrace_collector.scoring.embeddings import LocalEmbedder
        from ragtrace_collector.scoring.judges.local import LocalJudge
        vec = LocalEmbedder.shared().embed(["offline sentence"])
        judge = LocalJudge()
        claims = asyncio.run(judge.extract_claims("q", "Paris is the capital of France."))
        verdicts = asyncio.run(judge.verify_claims(claims, ["Paris is the capital of France."]))
        print(json.dumps({"shape": list(vec.shape), "verdict": verdicts[0].verdict}))
        """
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"shape": [1, DIMENSION], "verdict": "yes"}


def test_unit_vectors_and_similar_sentences_closer_than_unrelated(embedder: LocalEmbedder) -> None:
    vecs = embedder.embed(
        [
            "The cat sits on the mat.",
            "A cat is sitting on a rug.",
            "Quarterly revenue fell by ten percent.",
            "How do I reset my router password?",
            "Steps to change the password of a wifi router.",
        ]
    ).astype(np.float64)
    assert vecs.shape == (5, DIMENSION)
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    sims = vecs @ vecs.T
    assert sims[0, 1] > 0.6 > sims[0, 2]
    assert sims[3, 4] > sims[3, 0] + 0.3
    assert sims[3, 4] > sims[3, 2] + 0.3


def test_deterministic_and_independent_of_batch_mates(embedder: LocalEmbedder) -> None:
    text = "Use a dry microfiber cloth to wipe the screen."
    alone = LocalEmbedder(cache_size=0).embed([text])[0]
    batched = LocalEmbedder(cache_size=0).embed(
        ["short", text, "A much longer sentence that forces padding of the other rows in the batch, " * 3]
    )[1]
    np.testing.assert_allclose(alone, batched, atol=1e-5)
    np.testing.assert_array_equal(embedder.embed([text]), embedder.embed([text]))


def test_empty_text_embeds_to_zero_and_cache_counts(embedder: LocalEmbedder) -> None:
    fresh = LocalEmbedder(cache_size=8)
    out = fresh.embed(["", "   ", "hello world", "hello world"])
    assert not out[0].any() and not out[1].any()
    np.testing.assert_array_equal(out[2], out[3])
    assert fresh.cache_misses == 1
    fresh.embed(["hello world"])
    assert fresh.cache_hits == 1


def test_missing_or_unpinned_files_fail_clearly(tmp_path: Path) -> None:
    with pytest.raises(EmbeddingModelError, match="not found"):
        LocalEmbedder(model_path=tmp_path / "absent.onnx")
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an onnx file")
    with pytest.raises(EmbeddingModelError, match="cannot load"):
        LocalEmbedder(model_path=broken)
