"""The whole plan of a profile: every stage's plan, rendered as text or written as files.

Pure: it reads the profile and the repository's declarations, never the cloud.
"""

from __future__ import annotations

import json
from pathlib import Path

from flows.config.profile import Profile
from flows.core.stage import StagePlan
from flows.stages import STAGES


def build_plan(profile: Profile) -> list[StagePlan]:
    return [stage.plan(profile) for stage in STAGES]


def render_text(profile: Profile, plans: list[StagePlan]) -> str:
    lines = [f"profile {profile.name} · backend {profile.backend}"]
    if profile.gke is not None:
        gke = profile.gke
        lines.append(f"cluster {gke.cluster} in {gke.zone} · {gke.machine_type} {gke.topology} "
                     f"x{gke.num_slices} = {gke.total_chips} chips · "
                     f"${gke.idle_usd_per_hour:,.2f}/h while the pool exists")
    for number, plan in enumerate(plans, 1):
        lines += ["", f"{number}. {plan.stage} — {plan.title}  [key {plan.key}]"]
        lines += [f"   in   {name}: {uri}" for name, uri in plan.inputs.items()]
        lines += [f"   out  {name}: {uri}" for name, uri in plan.outputs.items()]
        lines += [f"   do   {action}" for action in plan.actions]
        for workload in plan.workloads:
            lines.append(f"   run  {workload.name} on {workload.placement} ({workload.image})")
            lines.append(f"        {workload.command}")
            for name, value in {**workload.env, **workload.secret_env}.items():
                lines.append(f"        env {name}={value}")
        if plan.estimated_chip_hours:
            lines.append(f"   est. {plan.estimated_chip_hours:.1f} TPU chip-hours held")
        lines += [f"   note {note}" for note in plan.notes]
    if profile.gke is not None:
        from flows.backends.gke.infra.cost import cost_plan, render_cost

        lines += ["", *render_cost(cost_plan(profile))]
    return "\n".join(lines)


def write_plan(profile: Profile, plans: list[StagePlan], out_dir: Path) -> list[Path]:
    """One JSON file per stage plus an executable-looking command file per workload."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for number, plan in enumerate(plans, 1):
        path = out_dir / f"{number}-{plan.stage}.json"
        path.write_text(json.dumps(plan.model_dump(), indent=2) + "\n")
        written.append(path)
        for workload in plan.workloads:
            cmd = out_dir / f"{number}-{plan.stage}-{workload.name}.sh"
            env = "".join(f"# env {k}={v}\n" for k, v in {**workload.env,
                                                           **workload.secret_env}.items())
            cmd.write_text(f"# {workload.name} on {workload.placement} ({workload.image})\n"
                           f"{env}{workload.command}\n")
            written.append(cmd)
    if profile.backend == "gke":
        from flows.backends.gke.jobs.manifests import write_manifests

        written += write_manifests(profile, out_dir / "manifests")
    summary = out_dir / "plan.txt"
    summary.write_text(render_text(profile, plans) + "\n")
    written.append(summary)
    return written
