"""GKE infrastructure for the pipeline: bucket, Cluster Toolkit deploy, IAM, pre-flight, cost.

The tutorial's set-up and clean-up steps, made idempotent and prompt-free. Pure parts (argv,
plans, checks, blueprint edits, prices) are separate from the parts that touch the cloud, and
every cloud read goes through one small seam (``cloud.GoogleApis``) so tests fake it there.
"""
