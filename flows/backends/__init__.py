"""Backends run Workloads: ``local`` (subprocesses in the rehearsal venv) and ``gke`` (issue #5)."""
