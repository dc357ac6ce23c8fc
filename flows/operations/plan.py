"""The whole plan of a profile: every stage's plan, rendered as text or written as files.

Pure: it reads the profile and the repository's declarations, never the cloud. A caller
that renders and writes one plan hands every function here the one backend it built
(``backend``; None: built here for this call alone).
"""

from __future__ import annotations

import json
from pathlib import Path

from flows.backends import backend_for
from flows.config.profile import Profile
from flows.core import planned_programs
from flows.core.backend import Backend
from flows.core.safe_writes import write_text
from flows.core.stage import StagePlan
from flows.core.workload import Workload
from flows.stages import stages_for


def planned_workloads(profile: Profile, backend: Backend | None = None) -> dict[str, Workload]:
    return planned_programs.planned_workloads(profile, (backend or backend_for(profile)).runtime)


def build_plan(profile: Profile, backend: Backend | None = None) -> list[StagePlan]:
    backend = backend or backend_for(profile)
    return [stage.plan(profile, backend) for stage in stages_for(profile)]


def render_text(profile: Profile, plans: list[StagePlan], backend: Backend | None = None) -> str:
    backend = backend or backend_for(profile)
    lines = [f"profile {profile.name} · backend {profile.backend}", *backend.plan_header()]
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
    lines += backend.plan_footer()
    return "\n".join(lines)


def write_plan(profile: Profile, plans: list[StagePlan], out_dir: Path,
               backend: Backend | None = None) -> list[Path]:
    """One JSON file per stage plus an executable-looking command file per workload."""
    backend = backend or backend_for(profile)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for number, plan in enumerate(plans, 1):
        path = out_dir / f"{number}-{plan.stage}.json"
        write_text(path, json.dumps(plan.model_dump(), indent=2) + "\n", "the plan")
        written.append(path)
        for workload in plan.workloads:
            cmd = out_dir / f"{number}-{plan.stage}-{workload.name}.sh"
            env = "".join(f"# env {k}={v}\n" for k, v in {**workload.env,
                                                           **workload.secret_env}.items())
            write_text(cmd, f"# {workload.name} on {workload.placement} ({workload.image})\n"
                       f"{env}{workload.command}\n", "the plan")
            written.append(cmd)
    written += backend.write_plan_files(out_dir, planned_workloads(profile, backend))
    summary = out_dir / "plan.txt"
    write_text(summary, render_text(profile, plans, backend) + "\n", "the plan")
    written.append(summary)
    return written
