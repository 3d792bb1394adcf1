"""Scoring: metrics over RAG records, decided by a judge.

Public API: ``ragtrace_collector.scoring.engine.evaluate_record(record, metrics, judge, options=None)``,
``ragtrace_collector.scoring.judges.make_judge(spec, **kwargs)``, ``ragtrace_collector.scoring.options.ScoringOptions``,
``ragtrace_collector.scoring.metrics.METRICS`` (name → metric). Kept import-free so importing the package is cheap.
"""
