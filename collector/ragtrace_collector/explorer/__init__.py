"""The records explorer: the scored records, read-only, as HTML pages and a JSON API.

Served by the collector on its ``/metrics`` listener (``explorer.enabled``) from the results store
(:mod:`ragtrace_collector.scoring.results_store`): where the on-call engineer goes from an alert to the
records behind it and from a record to the reason for its score. See ``docs/explorer.md``.
"""

from ragtrace_collector.explorer.app import Explorer
from ragtrace_collector.explorer.views import EXPLORER_PATH

__all__ = ["EXPLORER_PATH", "Explorer"]
