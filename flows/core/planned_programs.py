"""Every workload a run submits, as a plan shows it: the three MaxText programs
(flows/core/programs.py) and the evaluations (flows/core/eval_programs.py) together.

A module of its own because the evaluations build on the programs (the trained model's
checkpoint path, the train entry point): collecting both here keeps that dependency one-way.
"""

from __future__ import annotations

from flows.config.profile import Profile
from flows.core.backend import ProgramRuntime
from flows.core.eval_programs import planned_eval_workloads
from flows.core.layout import Layout
from flows.core.programs import convert_workload, export_workload, train_workload
from flows.core.workload import Workload


def planned_workloads(profile: Profile, runtime: ProgramRuntime) -> dict[str, Workload]:
    """Every workload the program stages submit, by job (the stage, or for evaluate the
    workload), as a plan shows it: the image by its content tag and, for export and the
    trained model's evaluation, the last configured step (at run time: the newest
    checkpoint)."""
    layout = Layout(profile)
    step = int(profile.train.args.get("num_batches", 0))
    return {"convert": convert_workload(profile, layout, runtime),
            "train": train_workload(profile, layout, runtime),
            "export": export_workload(profile, layout, runtime, step),
            **planned_eval_workloads(profile, layout, runtime, step)}
