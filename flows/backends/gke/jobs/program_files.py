"""Programs of ours shipped to a pod beside the post-training image: one immutable ConfigMap,
mounted read-only at ``/tpurl/programs``.

Why not bake them into the patched image: the image's digest is an input of every stage that
runs in it, so a changed evaluation program would rebuild the image and rerun conversion,
training and export on the slice. A ConfigMap keeps the image (and those keys) as they are;
the program's digest is in the evaluation's own key instead (flows/core/eval_programs.py).

Why immutable and named by content: two runs that ship the same program share one object, a
changed program is a new name (a pod never sees a half-updated file, and kubelets need not
watch it: ``immutable: true``, Kubernetes >= 1.21; an update of its data is then refused,
``ValidateConfigMapUpdate``), and creating it is idempotent (409 means the same bytes are
already there). Size: kubernetes pkg/apis/core/validation/validation.go ``ValidateConfigMap``
sums the values' lengths against ``core.MaxSecretSize`` (1 MiB); the evaluation program is
about 10 KB; a recipe too large for it is refused when the profile is read
(flows/config/recipe_limits.py), and ``program_files_configmap`` still refuses a set that
grew too large since.

Rendering stays pure (the name comes from the digests the Workload carries); only the object
with its data reads the repository's files, in the plan and at submit time.
"""

from __future__ import annotations

import hashlib
from typing import Any

from flows.backends.gke.jobs.secret_objects import MANAGED_BY
from flows.common.paths import REPO_ROOT
from flows.config.recipe_limits import CONFIGMAP_MAX_BYTES
from flows.core.workload import ProgramFile, Workload

PROGRAMS_DIR = "/tpurl/programs"
VOLUME = "tpurl-programs"
MAX_BYTES = CONFIGMAP_MAX_BYTES  # a profile over it is refused at validation already


class ShippedFileRefused(ValueError):
    """A file a workload ships is not what the run planned: edited, removed or grown past
    the ConfigMap's limit since. The user's doing (a recipe is edited in place), not ours."""


def configmap_name(files: tuple[ProgramFile, ...]) -> str:
    digest = hashlib.sha256("\0".join(f"{f.name}={f.digest}" for f in files).encode())
    return f"tpurl-programs-{digest.hexdigest()[:12]}"


def program_path(name: str) -> str:
    """Where a shipped program is inside the pod."""
    return f"{PROGRAMS_DIR}/{name}"


def mounts(workload: Workload) -> list[dict[str, Any]]:
    """The container's share: the programs, read-only (none without files)."""
    if not workload.files:
        return []
    return [{"name": VOLUME, "mountPath": PROGRAMS_DIR, "readOnly": True}]


def volumes(workload: Workload) -> list[dict[str, Any]]:
    """The pod's share: the ConfigMap as a volume; its keys are the file names."""
    if not workload.files:
        return []
    return [{"name": VOLUME, "configMap": {"name": configmap_name(workload.files)}}]


def program_files_configmap(files: tuple[ProgramFile, ...], namespace: str) -> dict[str, Any]:
    """The object to create, with the files' text; refused (``ShippedFileRefused``) if a file
    is not the one planned or the set would not fit."""
    data: dict[str, str] = {}
    for f in files:
        try:
            raw = (REPO_ROOT / f.source).read_bytes()  # an absolute source stays as it is
        except OSError as exc:  # moved or removed since the workload was planned
            raise ShippedFileRefused(f"{f.source} cannot be read ({exc.strerror or exc}); it was "
                             "there when the run was planned: restore it, or change the "
                             "profile and run again") from None
        actual = hashlib.sha256(raw).hexdigest()[:len(f.digest)]
        if actual != f.digest:  # the file changed since the workload was planned
            raise ShippedFileRefused(f"{f.source} changed while the run was planned ({f.digest} → "
                             f"{actual}); run again so the stage's key names these bytes")
        data[f.name] = raw.decode()
    size = sum(len(v.encode()) for v in data.values())
    if size > MAX_BYTES:
        raise ShippedFileRefused(f"the programs {', '.join(data)} are {size} bytes, over a ConfigMap's "
                         f"{MAX_BYTES}")
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": configmap_name(files), "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": MANAGED_BY}},
            "immutable": True, "data": data}
