"""The embedded offline judge: claim support and relevance without a network, an API key or torch.

``LocalJudge()`` is what ``make_judge("local")`` and ``--judge local`` give; see :mod:`.judge`.
"""

from ragtrace_collector.scoring.judges.local.judge import LocalJudge

__all__ = ["LocalJudge"]
