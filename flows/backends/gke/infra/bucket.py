"""The pipeline's bucket, and the Cluster Toolkit deployment folder kept inside it.

Why keep the deployment folder in the bucket: it holds the Terraform state of the cluster.
If it stayed on the machine (or pod) that ran ``gcluster deploy``, the next run elsewhere
would deploy a second copy or be unable to destroy the first. It is uploaded after every
deploy attempt (a half-way failure's state matters most) and restored before a re-apply or
destroy. ``.terraform/`` (provider binaries, hundreds of MB) is left out: ``gcluster`` runs
``terraform init`` again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.api_core import exceptions as gexc

from flows.backends.gke.infra.settings import InfraSettings
from flows.core.failures import infrastructure, user_error
from flows.core.retry import is_infrastructure_fault

SKIP_DIRS = frozenset({".terraform"})


@dataclass
class BucketReport:
    name: str
    created: bool
    location: str
    warnings: list[str] = field(default_factory=list)


def ensure_bucket(client: Any, s: InfraSettings, project_number: str | None) -> BucketReport:
    """Create ``gs://bucket`` in the profile's region (uniform access) or accept ours as is."""
    name = s.gke.bucket
    fix_name = ("choose another gke.bucket (names are global), or grant this account "
                "storage.buckets.get on it if it is yours")
    try:
        bucket = client.lookup_bucket(name)
    except gexc.Forbidden as exc:
        raise user_error("infra", f"gs://{name} exists but this account may not read it (403)",
                         str(exc)[:300], fix_name) from None
    except gexc.GoogleAPICallError as exc:
        if not is_infrastructure_fault(exc):
            raise
        raise infrastructure("infra", f"GCS did not answer for gs://{name}", str(exc)[:300],
                        "retried automatically") from None
    if bucket is None:
        bucket = client.bucket(name)
        bucket.iam_configuration.uniform_bucket_level_access_enabled = True
        try:
            bucket = client.create_bucket(bucket, project=s.gke.project, location=s.gke.region)
        except gexc.Conflict as exc:
            raise user_error("infra", f"gs://{name} is taken by another project", str(exc)[:300],
                             fix_name) from None
        except gexc.Forbidden as exc:
            raise user_error("infra", f"not allowed to create gs://{name} in {s.gke.project}",
                             str(exc)[:300], "grant yourself roles/storage.admin on the "
                             "project, or create the bucket and set gke.bucket to it") from None
        return BucketReport(name, True, str(bucket.location or s.gke.region).upper())
    return _check_existing(bucket, s, project_number)


def _check_existing(bucket: Any, s: InfraSettings, project_number: str | None) -> BucketReport:
    location = str(bucket.location or "").upper()
    if location != s.gke.region.upper():
        raise user_error("infra",
            f"gs://{s.gke.bucket} is in {location or 'an unknown location'}, not {s.gke.region}",
            "TPU pods reading checkpoints across regions pay egress and lose bandwidth",
            f"use a bucket in {s.gke.region} (set gke.bucket to a new name and it is created "
            "there), or move the profile to the bucket's region")
    owner = str(bucket.project_number) if bucket.project_number is not None else None
    if project_number is not None and owner is not None and owner != str(project_number):
        raise user_error("infra", f"gs://{s.gke.bucket} belongs to another project (number {owner})",
                         f"{s.gke.project} is project number {project_number}",
                         "use a bucket of this project: set gke.bucket to a new name")
    report = BucketReport(s.gke.bucket, False, location)
    if not bucket.iam_configuration.uniform_bucket_level_access_enabled:
        report.warnings.append(f"gs://{s.gke.bucket} has uniform bucket-level access off: object "
                               "ACLs can grant more than IAM shows (`gcloud storage buckets "
                               f"update gs://{s.gke.bucket} --uniform-bucket-level-access`)")
    return report


def _local_files(root: Path) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in SKIP_DIRS for part in rel.parts) or path.is_symlink() or not path.is_file():
            continue
        files[rel.as_posix()] = path
    return files


def upload_folder(client: Any, bucket: str, local: Path, prefix: str) -> int:
    """Mirror ``local`` to ``gs://bucket/prefix`` (stale objects removed); returns files sent."""
    target = client.bucket(bucket)
    files = _local_files(local)
    for rel, path in files.items():
        target.blob(prefix + rel).upload_from_filename(str(path))
    for blob in client.list_blobs(bucket, prefix=prefix):
        if blob.name[len(prefix):] not in files:
            blob.delete()
    return len(files)


def download_folder(client: Any, bucket: str, prefix: str, local: Path) -> int:
    """Restore ``gs://bucket/prefix`` into ``local``; returns the number of files (0: none)."""
    count = 0
    for blob in client.list_blobs(bucket, prefix=prefix):
        rel = blob.name[len(prefix):]
        if not rel or rel.endswith("/"):
            continue
        dest = local / rel
        # an object name is text any writer of the bucket chose (a training pod can): one
        # with "..", or a second "/" after the prefix (an absolute path: local / "/x" is
        # "/x"), would be written outside the folder
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            raise user_error("infra", "refusing a deployment object outside its folder", blob.name,
                             f"inspect gs://{bucket}/{prefix}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        blob.download_to_filename(str(dest))
        count += 1
    return count


def write_json(client: Any, bucket: str, name: str, value: dict[str, Any]) -> None:
    client.bucket(bucket).blob(name).upload_from_string(json.dumps(value, indent=2) + "\n",
                                                        content_type="application/json")


def read_json(client: Any, bucket: str, name: str) -> dict[str, Any] | None:
    blob = client.bucket(bucket).get_blob(name)
    return json.loads(blob.download_as_text()) if blob is not None else None


def delete_bucket(client: Any, bucket: str) -> int:
    """``gcloud storage rm -r gs://bucket``: every object, then the bucket; returns objects."""
    count = 0
    for blob in client.list_blobs(bucket, versions=True):
        blob.delete()
        count += 1
    client.bucket(bucket).delete()
    return count
