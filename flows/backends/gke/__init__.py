"""The GKE backend's pure half: Workloads → Kubernetes objects, and observed status → Diagnosis.

Everything in this package that has no I/O in its name is a pure function of the profile and
the Workload, so manifests can be planned, golden-tested and schema-validated without a cluster.
"""
