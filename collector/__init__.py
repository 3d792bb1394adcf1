"""ragtrace collector: receives OTLP traces of RAG pipelines, samples and scores them."""

__version__ = "0.1.0"
