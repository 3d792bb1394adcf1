"""Where things are, for tests: the repository root and ``../shared`` beside it."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("RAGTRACE_SHARED_DIR", REPO.parent / "shared"))
