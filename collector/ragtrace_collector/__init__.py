"""ragtrace-collector: receives OTLP traces of RAG pipelines, assembles, samples and scores them.

The package reads as the pipeline: ``receiver`` → ``processor`` (assembly, conventions, sampling,
the sweep) → ``queue`` → ``scoring`` → ``exporter``, with ``model`` (the types that cross stages),
``telemetry`` (the collector's own metrics), ``service`` (composition root), ``internal`` (Redis
plumbing) and ``cli`` around it. See ARCHITECTURE.md.
"""

from ragtrace_collector.version import __version__

__all__ = ["__version__"]
