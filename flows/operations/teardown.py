"""The teardown flow: ``gcluster destroy`` of the pipeline's deployment, the bucket on request.

A Prefect flow (deployable beside rl-post-training) so the clean-up is as visible as the run:
its result lists what was removed and what was kept, and the chip-hours the static TPU pool
held from deploy to destroy. Deleting the bucket needs ``delete_bucket=True`` *and* the
bucket's name again in ``confirm_bucket``; both are checked before anything is touched.
It holds the profile's lock (no teardown while a run of the profile trains), and refuses to
run inside a pod of the cluster it would destroy: it would kill itself half-way.
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from prefect import flow, get_run_logger
from prefect.runtime import flow_run

from flows.backends.gke.infra import clients
from flows.backends.gke.infra.destroy import TeardownReport, teardown
from flows.backends.gke.infra.settings import settings_from_profile
from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.config import Profile, ProfileError, load_profile
from flows.config.capacity import price_for, reservation_kept
from flows.config.choices import GkeProfileName, gke_profile_names
from flows.config.gke_section import gke_section
from flows.core.error_redaction import redacting_errors
from flows.core.failures import user_error
from flows.deployed.declared import deployment_declared
from flows.deployed.run_choices import refuse_run_choices
from flows.flow_runs.run_log import readable_failures
from flows.flow_runs.run_origin import run_origin
from flows.locking.profile_lock import profile_lock


def _run_name() -> str:
    """``teardown-<profile>[-and-bucket]-<time>``: the run list says what was torn down."""
    params = flow_run.parameters or {}
    bucket = "-and-bucket" if params.get("delete_bucket") else ""
    return f"teardown-{params.get('profile', 'profile')}{bucket}-{datetime.now(UTC):%Y%m%d-%H%M%S}"


def gke_profile(profile: str, overrides: Mapping[str, str] | None,
                delete_bucket: bool = False) -> Profile:
    """The validated profile, refused with the field and the fix unless it runs on GKE. A
    deployment's run is first held to its deployment's job variables and profile
    (flows/deployed/run_choices.py): a run choosing another cluster would destroy it."""
    origin = run_origin()
    declared = deployment_declared()
    refuse_run_choices(declared, {"profile": profile, "delete_bucket": delete_bucket},
                       destructive=("delete_bucket",))
    cfg = load_profile(profile, overrides, origin=origin, deployed=declared.overrides,
                       deployed_env=declared.env,
                       deployed_profile=declared.profile)
    if cfg.gke is None:
        raise ProfileError(cfg.name, [Issue(
            "profile", f"uses backend {cfg.backend}: it has no cluster to tear down",
            f"choose a GKE profile ({', '.join(gke_profile_names())}, or a YAML file with "
            "backend: gke)", Failure.CONFIG_NOT_GKE)])
    return cfg


@flow(name="teardown", flow_run_name=_run_name, persist_result=True, result_serializer="json",
      validate_parameters=True)
@redacting_errors
def teardown_flow(profile: GkeProfileName, overrides: dict[str, str] | None = None,
                  delete_bucket: bool = False, confirm_bucket: str | None = None
                  ) -> TeardownReport:
    """Destroy the cluster of PROFILE (restored from the bucket); keep the bucket unless
    ``delete_bucket`` and ``confirm_bucket`` (its name typed again) are both given.

    Args:
        profile: The GKE profile whose cluster is destroyed (shipped under
            deployments/profiles).
        overrides: Profile fields, as "section.field": "value". A deployment's run may
            change only the run-tunable fields, none of which a teardown reads: the gke
            fields (project, region, zone, cluster, bucket) come from the profile and the
            deployment's env (TPURL_GKE__*), never from a run.
        delete_bucket: Also delete the profile's bucket (checkpoints, exports, results).
            Needs confirm_bucket too. A deployment's run may set it only when the
            deployment itself declares it (parameters.delete_bucket in prefect.yaml).
        confirm_bucket: The bucket's name typed again; the bucket is deleted only when it
            matches and delete_bucket is set.
    """
    readable_failures()  # the run page's log: a refusal once, without traceback
    cfg = gke_profile(profile, overrides, delete_bucket)
    if (here := current_gke_cluster()) == gke_section(cfg).cluster:
        raise user_error("infra", f"teardown of {here} is running inside {here} itself",
                         "    KUBERNETES_SERVICE_HOST is set and the GKE metadata names "
                         f"cluster {here}", "run the teardown deployment on the process pool "
                         "(prefect.yaml: tpurl-process) or `tpurl teardown` from a workstation")
    settings = settings_from_profile(cfg)
    logger = get_run_logger()
    with profile_lock(cfg.name, logger):
        apis, storage_client = clients.default_clients(settings)
        report = teardown(settings, apis, storage_client, logger,
                          delete_bucket=delete_bucket, confirm_bucket=confirm_bucket)
    print(report.render())
    return report


def live_cluster(cfg: Profile) -> tuple[dict[str, Any] | None, str]:
    """Read-only, for the preview: the GKE cluster as the API reports it now (None: none
    found), and "" or why it could not be read (never fatal: the preview then prices the
    profile's mode and says so)."""
    gke = gke_section(cfg)
    try:
        apis, _storage = clients.default_clients(settings_from_profile(cfg))
    except Exception:  # the teardown itself says why, with the fix, if it goes ahead
        return None, "no Google client here"
    try:
        return apis.get_cluster(gke.project, gke.region, gke.cluster), ""
    except Exception as exc:  # denied, no network: the profile's figures stand
        return None, (str(exc).splitlines() or [type(exc).__name__])[0][:200]


def teardown_preview(cfg: Profile, delete_bucket: bool, cluster: dict[str, Any] | None = None,
                     unread: str = "no live read asked for") -> list[str]:
    """Pure: what a teardown of ``cfg`` destroys and what that costs per hour now, for the
    confirmation. Each live TPU pool of ``cluster`` (``live_cluster``) is priced by the mode
    it bills in, as `tpurl status` prices it (cluster.live_capacity): after a change of
    gke.capacity without a run the pool destroyed is the old mode's. A reserved (static)
    pool bills every hour it exists; a pool that scales from zero bills only while a job
    holds nodes, so its idle rate is zero and its busy rate is the ceiling. Without a
    cluster read (``unread`` says why) the profile's mode is priced, and the line says so."""
    from flows.backends.gke.infra.cluster import live_capacity
    from flows.operations.status import chips_per_node, node_range

    g = cfg.gke
    assert g is not None, "teardown is for GKE profiles"
    lines = [f"tpurl teardown will destroy, in project {g.project} ({g.region}):",
             f"  cluster {g.cluster}: its TPU pool ({g.num_slices} × {g.topology} "
             f"{g.machine_type}, {g.total_chips} chips), its CPU pool, networks and service "
             "accounts (gcluster destroy)"]
    pools = [p for p in (cluster or {}).get("nodePools") or [] if chips_per_node(p)]
    if cluster is not None and not pools:
        lines.append(f"  cluster {g.cluster} has no TPU pool now: $0.00/h of TPU")
    elif cluster is None and not unread:
        lines.append(f"  no cluster {g.cluster} found now: no TPU pool bills")
    elif not pools:  # not read: the profile's own pool, at its mode's rate
        low = 0 if g.scales_from_zero else g.hosts_needed
        rate = _rate(", ".join(g.capacity_chain), low, g.hosts_needed, g.chips_per_host,
                     g.usd_per_chip_hour)
        lines.append(f"  the TPU pool costs {rate} at ${g.usd_per_chip_hour:.2f}/chip-hour "
                     f"(cluster not read: {unread}; priced at the profile's gke.capacity)")
    for pool in pools:
        mode, name = live_capacity(pool), pool.get("name", "?")
        price, whose = price_for(g.prices, mode)
        chips = chips_per_node(pool)
        low, most = node_range(pool)
        high = low if most is None else most
        lines.append(f"  TPU pool {name} ({mode}, as deployed) costs "
                     f"{_rate(mode, low, high, chips, price.usd_per_chip_hour)} at "
                     f"${price.usd_per_chip_hour:.2f}/chip-hour ({whose})")
        if mode not in g.capacity_chain:
            lines.append(f"  note: pool {name} is {mode}, the profile's gke.capacity is "
                         f"{', '.join(g.capacity_chain)}: it is priced as the pool it is")
    if g.reservation:
        lines.append("  kept: " + reservation_kept(g.reservation, g.zone, g.project,
                                                   g.total_chips * g.usd_per_chip_hour))
    if delete_bucket:
        lines.append(f"  bucket gs://{g.bucket} with every checkpoint, export and the "
                     "deployment record: this cannot be undone")
    else:
        lines.append(f"  kept: bucket gs://{g.bucket} (checkpoints, exports, the deployment "
                     "record)")
    return lines


def _rate(mode: str, low: int, high: int, chips: int, usd_per_chip_hour: float) -> str:
    """A pool's hourly cost: what its lowest node count bills while it exists, and, for a
    pool that scales, what a job holding every node it may grow to bills."""
    idle, busy = low * chips * usd_per_chip_hour, high * chips * usd_per_chip_hour
    if low == high:
        return f"${idle:,.2f}/h (static {mode} pool: billed while it exists)"
    if low == 0:
        return (f"$0.00/h while no job holds TPU nodes, ${busy:,.2f}/h while one does "
                f"({mode} pool scales from zero)")
    return f"${idle:,.2f}/h at its {low} nodes, ${busy:,.2f}/h at {high} ({mode} pool)"


METADATA_CLUSTER = ("http://metadata.google.internal/computeMetadata/v1/instance/attributes/"
                    "cluster-name")


def current_gke_cluster(environ: Mapping[str, str] | None = None,
                        fetch: Callable[[str], str | None] | None = None) -> str | None:
    """The GKE cluster this process runs in, or None outside a pod (or off GKE)."""
    env = os.environ if environ is None else environ
    if not env.get("KUBERNETES_SERVICE_HOST"):
        return None
    return (fetch or _metadata)(METADATA_CLUSTER)


def _metadata(url: str) -> str | None:
    request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return response.read().decode().strip() or None
    except OSError:
        return None
