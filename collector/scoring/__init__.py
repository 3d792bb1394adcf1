"""Scoring: metrics over RAG records, decided by a judge.

Public API: ``collector.scoring.engine.evaluate_record(record, metrics, judge, options=None)``,
``collector.scoring.judges.make_judge(spec, **kwargs)``, ``collector.scoring.options.ScoringOptions``,
``collector.scoring.metrics.METRICS`` (name → metric). Kept import-free so importing the package is cheap.
"""
