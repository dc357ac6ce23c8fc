"""The GKE backend's planning and pricing members (flows/core/backend.py's Planning and
Pricing): what a plan prints and writes, the read-only checks, and the chip-hours and dollars.

Apart from backend.py, which runs workloads, because none of this touches a cluster: a plan
builds the backend and calls only these. The money itself is computed in infra/cost.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from flows.backends.gke.infra.cost import (
    cost_plan,
    render_cost,
    stage_estimated_chip_hours,
    stage_held_chip_hours,
)
from flows.backends.gke.jobs.manifests import write_manifests
from flows.common.issues import Issue
from flows.config.profile import Profile
from flows.core.workload import Workload


class GkePlanning:
    profile: Profile

    @property
    def usd_per_chip_hour(self) -> float:
        assert self.profile.gke is not None
        return self.profile.gke.usd_per_chip_hour

    def estimated_chip_hours(self, stage: str) -> float:
        return stage_estimated_chip_hours(self.profile, stage)

    def held_chip_hours(self, stage: str, wall_s: float) -> float:
        """Held, not busy: the static pool bills every chip for the stage's whole wall time
        (a pool that scales from zero only the stage's own chips); the image is built before
        the cluster exists."""
        return 0.0 if stage == "image" else stage_held_chip_hours(self.profile, wall_s,
                                                                  stage=stage)

    def plan_header(self) -> list[str]:
        gke = self.profile.gke
        assert gke is not None
        return [f"cluster {gke.cluster} in {gke.zone} · {gke.machine_type} {gke.topology} "
                f"x{gke.num_slices} = {gke.total_chips} chips · capacity {gke.capacity} · "
                + ("no TPU node while nothing trains" if gke.scales_from_zero
                   else f"${gke.idle_usd_per_hour:,.2f}/h while the pool exists")]

    def plan_footer(self) -> list[str]:
        return ["", *render_cost(cost_plan(self.profile))]

    def write_plan_files(self, out_dir: Path, workloads: Mapping[str, Workload]) -> list[Path]:
        return write_manifests(self.profile, workloads, out_dir / "manifests")

    def preflight(self) -> tuple[str, bool]:
        from flows.backends.gke.infra.entry import check_text

        text, ok = check_text(self.profile)
        missing = self.start_issues()  # what the flow would refuse at start, shown here too
        lines = [f"FAIL start ({i.category}): {i.render()}" for i in missing]
        return "\n".join([text, *lines]), ok and not missing

    def start_issues(self) -> list[Issue]:
        from flows.backends.gke.readiness import probe, start_issues

        return start_issues(self.profile, probe(self.profile))

    def validation_warnings(self) -> list[str]:
        from flows.backends.gke.infra.settings import world_open_warning

        gke = self.profile.gke
        assert gke is not None
        warning = world_open_warning(gke)
        return [warning] if warning else []
