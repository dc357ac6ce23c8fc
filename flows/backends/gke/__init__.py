"""The GKE backend: the patched image (image/), the cluster and bucket (infra/), Workloads as
JobSets (jobs/), and their observed status turned into a verdict (watch/).

``backend.py``, ``gcs.py`` and the API-facing modules do the I/O; the rest (manifests, plans,
verdicts, blueprint edits, prices) are pure functions of the profile and the Workload, so
manifests can be planned, golden-tested and schema-validated without a cluster.
"""
