"""Every object the GKE backend would submit for a profile, and `tpurl plan --out DIR` files.

The Secrets are placeholders (no value): the plan shows that a Secret will exist and where
its value comes from, never the value. Files are named ``NN-<kind>-<name>.yaml`` so a
directory listing reads in apply order (Secrets before the JobSets that mount them).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from flows.backends.gke.jobs.options import GkeOptions, options_for
from flows.backends.gke.jobs.program_files import program_files_configmap
from flows.backends.gke.jobs.render import render_jobset
from flows.backends.gke.jobs.secret_objects import secret_placeholder
from flows.config.eval_hours import EVALUATE, PROGRAM_STAGES
from flows.config.profile import Profile, SecretRef
from flows.core.eval_programs import base_eval_key, score_key, trained_eval_key
from flows.core.layout import Layout, convert_key, export_key
from flows.core.lineage import config_key
from flows.core.safe_writes import write_text
from flows.core.workload import ProgramFile, Workload

GKE_STAGES = (*PROGRAM_STAGES, EVALUATE)
WATCH = "watch"  # a watch's evaluation (flows/operations/watch.py): a JobSet outside any run
# A stage that submits more than one workload names each JobSet after the workload: the
# evaluate stage scores the base and the trained model in two JobSets, each under the key of
# the score it makes (the base's is shared by every run that trains from that base).
STAGE_JOBS = {"evaluate": ("evaluate-base", "evaluate-trained")}


def job_of(stage: str, workload: str) -> str:
    """What a JobSet's name and stage label carry: the stage, or the workload where the stage
    submits several (``STAGE_JOBS``)."""
    return workload if workload in STAGE_JOBS.get(stage, ()) else stage


def jobs_of(stage: str) -> tuple[str, ...]:
    return STAGE_JOBS.get(stage, (stage,))


def stage_run(profile: Profile, job: str) -> str:
    """What names a job's JobSet besides the job: its content key (train: the run name,
    ``rl-<run key>``), so the same configuration always maps to the same JobSet. Runs of
    one training that differ in length share the train JobSet's name, as they share its
    directory: one writes there at a time, and the spec digest tells them apart (a JobSet
    of another length still there is refused, recovery.py on_conflict)."""
    if job == "convert":
        return convert_key(profile)
    if job == "train":
        return Layout(profile).run_name
    if job == "export":
        return export_key(profile)
    if job == "evaluate-base":
        return base_eval_key(profile)
    if job == "evaluate-trained":
        return trained_eval_key(profile)
    if job == WATCH:
        # a watch's profile scores on the watched set: one JobSet name per profile and set,
        # so a second watch of that set while one runs is refused by its other spec
        # (recovery.py on_conflict), never attached to it or to a run's evaluation
        return config_key(WATCH, score_key(profile))
    raise ValueError(f"{job!r} submits nothing to GKE (one of convert, train, export, "
                     f"{', '.join(STAGE_JOBS['evaluate'])}, {WATCH})")


def render_all(profile: Profile, workloads: Mapping[str, Workload],
               options: GkeOptions | None = None) -> list[dict[str, Any]]:
    """Secrets (placeholders, deduplicated), the shipped programs' ConfigMaps, then one
    JobSet per job, in submission order. ``workloads`` are the planned workloads by job
    (flows/core/planned_programs.py ``planned_workloads``); ``options`` the backend's (None:
    a plan's, outside any run)."""
    options = options or options_for(profile)
    refs: dict[str, SecretRef] = {}
    shipped: dict[tuple[ProgramFile, ...], None] = {}
    for workload in workloads.values():
        for _, ref in workload.secret_env:
            refs.setdefault(ref.describe(), ref)
        if workload.files:
            shipped.setdefault(workload.files)
    objects = [secret_placeholder(ref, options.gke.namespace, options.secret_owner)
               for ref in refs.values()]
    objects += [program_files_configmap(files, options.gke.namespace) for files in shipped]
    objects += [render_jobset(workload, profile, run=stage_run(profile, job), stage=job,
                              options=options) for job, workload in workloads.items()]
    return objects


def to_yaml(obj: dict[str, Any]) -> str:
    """Block-style YAML, keys in rendering order, long commands as literal blocks."""
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     width=100, allow_unicode=True)


def write_manifests(profile: Profile, workloads: Mapping[str, Workload], out_dir: Path,
                    options: GkeOptions | None = None) -> list[Path]:
    """One YAML file per object the backend would submit; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for number, obj in enumerate(render_all(profile, workloads, options), 1):
        path = out_dir / f"{number:02d}-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
        write_text(path, to_yaml(obj), "the plan's manifests")
        written.append(path)
    return written


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)
