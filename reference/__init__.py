"""Reference pages read from the code, so what users read cannot drift from what runs.

Each module renders one page of docs/reference/ from the object that decides it (the CLI's
parser, the profile's models, prefect.yaml, the event catalogue, the failure vocabulary, the
result models); ``python -m reference`` writes them and tests/test_docs_reference.py
fails when a committed page differs from what the code renders now.
"""
