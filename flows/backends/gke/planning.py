"""The GKE backend's planning members (flows/core/backend.py's Planning): what a plan prints
and writes, and the read-only checks of ``tpurl plan --check`` and ``validate``.

Apart from backend.py, which runs workloads, because none of this touches a cluster: a plan
builds the backend and calls only these and the prices (``GkePricing``, infra/cost.py, beside
the money it comes from). GkeBackend holds one GkePlanning and answers the protocol through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from flows.backends.gke.infra.cost import cost_plan, render_caps, render_cost
from flows.backends.gke.jobs.manifests import jobs_of, write_manifests
from flows.backends.gke.jobs.options import GkeOptions
from flows.backends.gke.secret_grants import plan_lines, shipped_replaceable
from flows.common.issues import Issue
from flows.config.eval_hours import tpu_stages
from flows.config.gke_section import gke_section
from flows.config.profile import Profile
from flows.core.backend import ProgramRuntime
from flows.core.budgets import budgets_for, render_waits, stage_waits
from flows.core.planned_programs import planned_workloads
from flows.core.retry import RETRY_DELAYS_S
from flows.core.workload import Workload


class GkePlanning:
    """What a plan of a GKE profile prints, writes and checks, from the profile and the
    program runtime (the workloads whose Secrets the plan lists)."""

    def __init__(self, profile: Profile, options: GkeOptions, runtime: ProgramRuntime) -> None:
        self.profile, self.options, self.runtime = profile, options, runtime
        self.gke = options.gke

    def plan_header(self) -> list[str]:
        gke = self.gke
        return [f"cluster {gke.cluster} in {', '.join(gke.zone_order)} · {gke.machine_type} "
                f"{gke.topology} x{gke.num_slices} = {gke.total_chips} chips · capacity "
                f"{', '.join(gke.capacity_chain)} · "
                + ("no TPU node while nothing trains" if gke.scales_from_zero
                   else f"${gke.idle_usd_per_hour:,.2f}/h while the reservation exists")]

    def plan_footer(self) -> list[str]:
        waits = [stage_waits(s, budgets_for(self.profile, s), RETRY_DELAYS_S, len(jobs_of(s)))
                 for s in tpu_stages(self.profile)]
        return ["", *render_cost(cost_plan(self.profile)), *render_caps(self.profile), "",
                *self._parity(), "", *render_waits(waits), "", *self._secrets()]

    def _secrets(self) -> list[str]:
        """Who the flow pod is (flow_pools.py), every Secret the run writes, and whether the
        shipped Role may replace it (secret_grants.py)."""
        from flows.backends.gke import flow_pools

        owner = self.options.secret_owner
        team = owner.removeprefix("team:") if owner.startswith("team:") else None
        return [*flow_pools.plan_lines(team, self.gke.project),
                *plan_lines(planned_workloads(self.profile, self.runtime), self.gke.namespace,
                            owner, shipped_replaceable(owner))]

    def _parity(self) -> list[str]:
        """Where the rehearsal's lock differs from the image (flows/backends/gke/image/parity.py)."""
        from flows.backends.gke.image.parity import parity_lines, read_rehearsal_versions
        from flows.common.paths import PATCHES_FILE
        from flows.core.patching import enabled, load_declarations

        lock = read_rehearsal_versions()
        patches = enabled(load_declarations(PATCHES_FILE), self.profile.image.disabled_patches)
        return parity_lines(self.profile.image.base, lock, None, patches)

    def write_plan_files(self, out_dir: Path, workloads: Mapping[str, Workload]) -> list[Path]:
        return write_manifests(self.profile, workloads, out_dir / "manifests", self.options)

    def preflight(self) -> tuple[str, bool]:
        from flows.backends.gke.infra.infra_stage import check_text

        text, ok = check_text(self.profile)
        missing = self.start_issues()  # what the flow would refuse at start, shown here too
        lines = [f"FAIL start ({i.category}): {i.render()}" for i in missing]
        return "\n".join([text, *lines]), ok and not missing

    def start_issues(self) -> list[Issue]:
        from flows.backends.gke.readiness import probe, start_issues

        owner = self.options.secret_owner  # the run's team, decided once (team:NAME)
        return start_issues(self.profile, probe(self.profile),
                            owner.removeprefix("team:") if owner.startswith("team:") else None)

    def validation_warnings(self) -> list[str]:
        from flows.backends.gke.infra.settings import world_open_warning
        from flows.config.fit_rules import fit_warning

        found = [world_open_warning(self.gke), fit_warning(self.profile)]
        return [w for w in found if w] + unpinned_image_warnings(self.profile)


def unpinned_image_warnings(profile: Profile) -> list[str]:
    """Images a GKE run pulls by a tag only: whoever can push to their
    repository can change what runs, privileged, on the TPU hosts."""
    gke = gke_section(profile)
    out = []
    if "@sha256:" not in profile.image.base:
        out.append(f"WARNING: image.base {profile.image.base} is pinned by tag only; pin it by "
                   "digest (IMAGE:TAG@sha256:...) so a moved tag cannot change what trains")
    missing = [f"gke.{f}" for f in ("pathways_server_digest", "pathways_proxy_digest")
               if getattr(gke, f) is None]
    if missing:
        out.append(f"WARNING: the Pathways images ({gke.pathways_tag}) are pulled by tag: set "
                   f"{' and '.join(missing)} (`gcloud artifacts docker images describe "
                   "IMAGE:TAG` prints them)")
    return out
