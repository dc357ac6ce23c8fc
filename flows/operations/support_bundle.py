"""`tpurl support-bundle PROFILE [--run NAME]`: one archive with what a failed first contact
needs, so the person who hit it sends one file instead of answering twenty questions.

What goes in (each source a folder of the archive; a source that cannot be read becomes a line
of ``errors.txt``, never a missing bundle): the profile as written and as resolved, the plan
and the rendered manifests, the edited blueprint (local, else the copy the deploy saved in the
bucket), the cluster and its node pools as the GKE API reports them, the live JobSets,
Workloads, pods, events and nodes, the Kueue LocalQueue/ClusterQueue/ResourceFlavors, the
pods' log tails, the pre-flight report, the image reference with its declared patches and the
persisted run results, this product's version and its dependencies', and the stages' log files
from the bucket.

Read-only by construction: GETs and lists only (the pre-flight is the read-only one of
`tpurl plan --check`); nothing is created, granted or deleted. Every text is redacted before
it is written: the profile's resolved secret values (and their base64), anything shaped like
a Hugging Face token, Google OAuth access tokens and bearer headers.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import platform
import re
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from flows.config.gke_section import gke_section
from flows.config.profile import Profile
from flows.config.secret_ref import secret_refs
from flows.core.secrets import Redactor

LOG_TAIL_LINES = 500
STAGE_LOG_TAIL_BYTES = 1_000_000
RUN_LABEL = "tpurl/run"
# a Kubernetes label value (what the tpurl/run label holds), and so one path segment
RUN_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_-]|\.(?!\.)){0,61}(?<!\.)[A-Za-z0-9]?")


def redactor_for(profile: Profile, environ: dict[str, str] | None = None) -> Callable[[str], str]:
    """The process's redaction (flows/core/redaction.py: known values in every encoding,
    then the token shapes, so a value the profile does not reference is caught too), with
    every secret the profile references resolved and registered first: each SecretRef
    wherever it is (the hub token, a W&B key, an MLflow token, a registry's token; found by
    walking the profile, flows/config/secret_ref.py ``secret_refs``), and the notification
    block's webhook URL or password, read from the Prefect API the profile's runs use."""
    from flows.core.secrets import resolve

    redactor = Redactor()
    project = profile.gke.project if profile.gke else None
    api = _prefect_api_configured()
    for _field, ref in secret_refs(profile):
        if ref.secret_block is not None and not api:
            continue  # no API to read the block from (and no temporary one is started)
        with contextlib.suppress(Exception):  # unresolvable here: the shapes still apply
            resolve(ref, environ, project)  # registers the value and its forms
    if profile.notify is not None and api:
        with contextlib.suppress(Exception):  # a block gone or unreadable: shapes still apply
            _register_block_secrets(profile.notify.block)
    return redactor


def _prefect_api_configured() -> bool:
    from prefect.settings import PREFECT_API_URL

    return bool(PREFECT_API_URL.value())


def _register_block_secrets(reference: str) -> None:
    """Every secret field of the notification block (``TYPE/NAME``), and every URL in it:
    a webhook URL is the credential itself, even where the block keeps it as plain text."""
    from prefect.blocks.core import Block

    from flows.core.redaction import register

    block = Block.load(reference)
    # typed as the block or a coroutine (Prefect's async dispatch): called from sync code,
    # as here, it is the block
    assert isinstance(block, Block)
    for value in _block_strings(block.model_dump(context={"include_secrets": True})):
        register(value)


def _block_strings(value: Any) -> list[str]:
    """The secret and URL strings of a block's fields (nested dicts and lists included)."""
    if isinstance(value, dict):
        return [s for item in value.values() for s in _block_strings(item)]
    if isinstance(value, list | tuple):
        return [s for item in value for s in _block_strings(item)]
    if hasattr(value, "get_secret_value"):
        return _block_strings(value.get_secret_value()) or [str(value.get_secret_value())]
    text = str(value) if value is not None and not isinstance(value, bool | int | float) else ""
    return [text] if "://" in text or "@" in text else []


class Bundle:
    """The archive's files, collected source by source; a failing source is noted, not fatal."""

    def __init__(self, redact: Callable[[str], str]) -> None:
        self.redact = redact
        self.files: dict[str, str] = {}
        self.errors: list[str] = []

    def text(self, path: str, content: str) -> None:
        self.files[path] = self.redact(content)

    def json(self, path: str, value: Any) -> None:
        self.text(path, json.dumps(value, indent=2, default=str, sort_keys=True) + "\n")

    def source(self, name: str, collect: Callable[[], None]) -> None:
        try:
            collect()
        except Exception as exc:  # every source is best effort: a failed contact is the point
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            self.errors.append(self.redact(f"{name}: {type(exc).__name__}: {first[:500]}"))

    def write(self, out: Path) -> Path:
        if self.errors:
            self.files["errors.txt"] = "\n".join(self.errors) + "\n"
        out.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(out, "w:gz") as tar:
            for path, content in sorted(self.files.items()):
                data = content.encode()
                info = tarfile.TarInfo(f"{out.name.removesuffix('.tar.gz')}/{path}")
                info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
                tar.addfile(info, io.BytesIO(data))
        return out


def _plain(obj: Any) -> Any:
    return obj.to_dict() if hasattr(obj, "to_dict") else obj


def _raw(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The API's own JSON, not the client's models: exactly what the server reports (the
    models also refuse objects missing a field they require, which is no reason to lose it)."""
    response = call(*args, _preload_content=False, **kwargs)
    data = response.data
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)


def _items(call: Callable[..., Any], *args: Any) -> list[Any]:
    return list(json.loads(_raw(call, *args)).get("items") or [])


def _selected(items: list[Any], run: str | None) -> list[Any]:
    objs = [_plain(o) for o in items]
    if run is None:
        return objs
    return [o for o in objs
            if ((o.get("metadata") or {}).get("labels") or {}).get(RUN_LABEL) == run]


def collect(profile: Profile, apis: Any, storage_client: Any, kube: Any | None,
            run: str | None = None, raw_profile: str = "",
            environ: dict[str, str] | None = None) -> Bundle:
    from flows.backends.gke.infra.settings import BLUEPRINT_FILE, settings_from_profile

    gke = gke_section(profile)
    s = settings_from_profile(profile)
    bundle = Bundle(redactor_for(profile, environ))
    bundle.json("bundle.json", {"profile": profile.name, "run": run, "created":
                                datetime.now(UTC).isoformat(), "contents": __doc__})
    bundle.text("profile/as-written.yaml", raw_profile or "(not read)\n")
    bundle.json("profile/resolved.json", profile.model_dump(mode="json"))
    bundle.source("plan", lambda: _plan(bundle, profile))
    cluster: dict[str, Any] = {}

    def cloud() -> None:
        found = apis.get_cluster(gke.project, gke.region, gke.cluster)
        cluster.update(found or {})
        bundle.json("cloud/cluster.json", found)
        bundle.json("cloud/node-pools.json", (found or {}).get("nodePools", []))
    bundle.source("cloud", cloud)

    def blueprint() -> None:
        local = s.workdir / BLUEPRINT_FILE
        if local.is_file():
            bundle.text("blueprint/edited.yaml", local.read_text())
        saved = f"{s.state_prefix}deployment/.ghpc/artifacts/expanded_blueprint.yaml"
        blob = storage_client.bucket(gke.bucket).get_blob(saved)
        if blob is not None:
            bundle.text("blueprint/deployed-expanded.yaml", blob.download_as_text())
        meta = storage_client.bucket(gke.bucket).get_blob(f"{s.state_prefix}deployment.json")
        if meta is not None:
            bundle.text("blueprint/deployment.json", meta.download_as_text())
    bundle.source("blueprint", blueprint)
    if kube is not None:
        _kubernetes(bundle, kube, gke.namespace, run)
    bundle.source("kueue", lambda: bundle.json("kubernetes/kueue.json", apis.kueue_objects(
        cluster, gke.namespace, gke.kueue_queue)) if cluster else None)
    bundle.source("preflight", lambda: _preflight(bundle, profile, apis, storage_client))
    bundle.source("image", lambda: _image(bundle, profile, storage_client, run))
    bundle.source("versions", lambda: bundle.json("versions.json", versions()))
    bundle.source("stage logs", lambda: _stage_logs(bundle, storage_client, gke.bucket,
                                                    log_dirs(profile, run)))
    return bundle


def _plan(bundle: Bundle, profile: Profile) -> None:
    from flows.operations.plan import build_plan, write_plan

    with tempfile.TemporaryDirectory() as tmp:
        for path in write_plan(profile, build_plan(profile), Path(tmp)):
            bundle.text(f"plan/{path.relative_to(tmp)}", path.read_text())


def _kubernetes(bundle: Bundle, kube: Any, ns: str, run: str | None) -> None:
    from flows.backends.gke.watch.client import (
        JOBSET_GROUP,
        JOBSET_VERSION,
        JOBSETS,
        KUEUE_GROUP,
        WORKLOADS,
        kueue_version,
    )

    def custom(group: str, version: str, plural: str) -> list[Any]:
        listed = kube.custom.list_namespaced_custom_object(group, version, ns, plural)
        return _selected(listed.get("items", []), run)

    bundle.source("jobsets", lambda: bundle.json(
        "kubernetes/jobsets.json", custom(JOBSET_GROUP, JOBSET_VERSION, JOBSETS)))
    bundle.source("workloads", lambda: bundle.json(
        "kubernetes/workloads.json", custom(KUEUE_GROUP, kueue_version(kube), WORKLOADS)))
    pods: list[Any] = []

    def list_pods() -> None:
        pods.extend(_selected(_items(kube.core.list_namespaced_pod, ns), run))
        bundle.json("kubernetes/pods.json", pods)
    bundle.source("pods", list_pods)
    bundle.source("events", lambda: bundle.json(
        "kubernetes/events.json", _items(kube.core.list_namespaced_event, ns)))
    bundle.source("nodes", lambda: bundle.json(
        "kubernetes/nodes.json", _items(kube.core.list_node)))
    for pod in pods:
        name = pod["metadata"]["name"]
        for container in (pod.get("spec") or {}).get("containers") or []:
            cname = container["name"]
            bundle.source(f"log {name}/{cname}", functools.partial(
                _pod_log, bundle, kube, ns, name, cname))


def _pod_log(bundle: Bundle, kube: Any, ns: str, pod: str, container: str) -> None:
    bundle.text(f"logs/pods/{pod}/{container}.log", _tail(_raw(
        kube.core.read_namespaced_pod_log, pod, ns, container=container,
        tail_lines=LOG_TAIL_LINES)))


def _tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(str(text).splitlines()[-lines:]) + "\n"


def _preflight(bundle: Bundle, profile: Profile, apis: Any, storage_client: Any) -> None:
    from flows.backends.gke.infra.infra_stage import check_text

    text, ok = check_text(profile, apis, storage_client)
    bundle.text("preflight.txt", f"{'passed' if ok else 'FAILED'}\n{text}\n")


def _image(bundle: Bundle, profile: Profile, storage_client: Any, run: str | None) -> None:
    from flows.common.paths import PATCHES_FILE
    from flows.core.layout import patched_image_ref

    bundle.json("image/reference.json", {"image": patched_image_ref(profile),
                                         "base": profile.image.base,
                                         "disabled_patches": profile.image.disabled_patches})
    if PATCHES_FILE.is_file():
        bundle.text("image/patches.yaml", PATCHES_FILE.read_text())
    from flows.run.result import result_uris

    latest = result_uris(profile, "latest")[1]  # gs://bucket/<root>/tpurl-results/<profile>/…
    bucket, _, name = latest.removeprefix("gs://").partition("/")
    prefix = name.rsplit("/", 1)[0] + "/"
    blobs = sorted(storage_client.list_blobs(bucket, prefix=prefix),
                   key=lambda b: str(b.updated or ""))
    for blob in [b for b in blobs if b.name.endswith("latest.json")] + blobs[-5:]:
        bundle.text(f"results/{blob.name.removeprefix(prefix)}", blob.download_as_text())


def log_dirs(profile: Profile, run: str | None) -> list[str]:
    """The object prefixes of this profile's stage logs: the stage directories its layout
    names (flows/core/layout.py; content-keyed, so another profile's or another
    configuration's directory is another path). With ``run`` (a tpurl/run label, which is a
    stage's content key, flows/backends/gke/jobs/manifests.py ``stage_run``: ``rl-<key>``
    for training), the directories of that key under each of this profile's stage folders
    instead. Nothing else in the bucket is read: other profiles' logs and runs share it,
    and the output root, but are not this profile's to send."""
    from flows.core.eval_programs import eval_dir
    from flows.core.layout import Layout
    from flows.core.manifest import LOGS_DIR
    from flows.core.storage import join

    layout = Layout(profile)
    dirs = [layout.sources_dir, layout.convert_dir, layout.train_run_dir, layout.export_dir]
    if profile.eval is not None:
        dirs += [eval_dir(layout, "base"), eval_dir(layout, "trained")]
    if run is not None:  # the same stage folders, the run's key in place of the current one
        dirs = [join(d.rsplit("/", 1)[0], run) for d in dirs]
    return [join(d, LOGS_DIR).split("://", 1)[-1].partition("/")[2] + "/" for d in dirs]


def _stage_logs(bundle: Bundle, storage_client: Any, bucket: str, prefixes: list[str]) -> None:
    for prefix in dict.fromkeys(prefixes):
        for blob in storage_client.list_blobs(bucket, prefix=prefix):
            data = blob.download_as_bytes()[-STAGE_LOG_TAIL_BYTES:]
            bundle.text(f"logs/stages/{blob.name}", data.decode("utf-8", "replace"))


def versions() -> dict[str, Any]:
    """This product and every dependency it declares, as installed here."""
    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    found = {"python": sys.version.split()[0], "platform": platform.platform()}
    product = "tpu-rl-pipeline"
    found[product] = version(product)
    for requirement in metadata.requires(product) or []:
        name = re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0]
        found.setdefault(name, version(name))
    return found


def bundle_command(profile: Profile, run: str | None, out: Path | None,
                   raw_profile: str = "") -> int:
    """For the CLI: collect, write, print where; 0 even when sources failed (listed inside)."""
    from flows.operations.status import read_only_clients

    if run is not None and not RUN_NAME.fullmatch(run):
        print(f"error: --run: {run!r} is not a run's name; fix: give the tpurl/run label a "
              "failure names (letters, digits, '-', '_', '.'; e.g. rl-0123456789ab)",
              file=sys.stderr)
        return 2
    opened = read_only_clients(profile, "support-bundle", say_reason=False)
    if opened is None:
        return 2
    apis, storage_client, kube = opened
    bundle = collect(profile, apis, storage_client, kube, run, raw_profile)
    if kube is None:
        bundle.errors.append("kubernetes: not reachable (no kubeconfig context or credentials)")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = bundle.write(out or Path(f"tpurl-support-{profile.name}-{stamp}.tar.gz"))
    print(f"wrote {path} ({len(bundle.files)} files"
          + (f"; {len(bundle.errors)} source(s) could not be read, see errors.txt)"
             if bundle.errors else ")"))
    return 0
