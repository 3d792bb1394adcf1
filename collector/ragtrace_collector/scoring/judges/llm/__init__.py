"""The LLM judge: its decisions (:mod:`.judge`: prompts out, validated replies back) over a transport
(:mod:`.transport`: the litellm call, retries, failure sorting, usage and cost), apart.

``LLMJudge`` and ``missing_key_variables`` are imported from here, as before the split.
"""

from __future__ import annotations

import os

# litellm reads this on import: the bundled model price map, never a download at start.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from .judge import LLMJudge
from .transport import Completion, LLMTransport, PromptLogprobs, TokenAlternatives, missing_key_variables

__all__ = ["Completion", "LLMJudge", "LLMTransport", "PromptLogprobs", "TokenAlternatives", "missing_key_variables"]
