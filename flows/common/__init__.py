"""Leaf types and places every layer may use (the finding type, the repository's paths).

It imports nothing of ``flows``: ``flows.config`` and ``flows.core`` both build on it, so
neither has to import the other's leaves (tests/test_import_graph.py).
"""
