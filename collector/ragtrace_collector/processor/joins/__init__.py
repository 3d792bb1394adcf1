"""The joins: steps after assembly that make one trace of what peers traced apart, one module per join.

Each keeps the contract in :mod:`.join` (completed traces in, completed traces out, some held back across
sweeps); ``processor/pipeline.py`` runs them in their one order. What the pairing joins remember between sweeps
is :mod:`.pairing` (one process) or :mod:`.redis_pairing` (receivers sharing Redis).
"""
