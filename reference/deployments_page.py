"""The deployments page, from prefect.yaml itself: what `prefect deploy` creates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from flows.common.paths import REPO_ROOT
from reference.markdown import cell, table

PREFECT_YAML = REPO_ROOT / "prefect.yaml"


def _schedules(deployment: dict[str, Any]) -> str:
    parts = []
    for schedule in deployment.get("schedules") or []:
        when = (f"cron `{schedule['cron']}` {schedule.get('timezone', 'UTC')}" if "cron" in schedule
                else f"every {schedule.get('interval')} s" if "interval" in schedule
                else f"rrule `{schedule.get('rrule')}`")
        state = "active" if schedule.get("active", True) else "inactive until turned on"
        parts.append(f"{when} ({state})")
    return "; ".join(parts) or "none"


def _concurrency(deployment: dict[str, Any]) -> str:
    limit = deployment.get("concurrency_limit")
    if not limit:
        return "none"
    if isinstance(limit, int):
        return str(limit)
    return f"{limit['limit']}, {limit.get('collision_strategy', 'ENQUEUE')}"


def _trigger_rows(deployment: dict[str, Any]) -> list[list[str]]:
    rows = []
    for trigger in deployment.get("triggers") or []:
        match = ", ".join(f"`{k}={v}`" for k, v in (trigger.get("match") or {}).items())
        rows.append([cell(trigger.get("name", "")), ", ".join(f"`{e}`" for e in trigger["expect"]),
                     match, "on" if trigger.get("enabled", True) else "off until enabled",
                     cell(trigger.get("description", ""))])
    return rows


def render(path: Path = PREFECT_YAML) -> str:
    spec = yaml.safe_load(path.read_text())
    lines = ["# Deployments", "", "Generated from `prefect.yaml` by `python -m reference`;"
             " do not edit by hand.", ""]
    lines += table(["deployment", "flow", "work pool", "parameters", "schedules",
                    "concurrency"],
                   [[f"`{d['name']}`", f"`{d['entrypoint']}`", f"`{d['work_pool']['name']}`",
                     cell(", ".join(f"`{k}={v}`" for k, v in (d.get("parameters") or {}).items())),
                     _schedules(d), _concurrency(d)] for d in spec["deployments"]])
    for deployment in spec["deployments"]:
        lines += ["", f"## `{deployment['name']}`", "", cell(deployment.get("description", ""))]
        variables = (deployment["work_pool"].get("job_variables") or {})
        if variables:
            lines += ["", "Job variables: " + ", ".join(f"`{k}`" for k in variables) + "."]
        triggers = _trigger_rows(deployment)
        if triggers:
            lines += ["", *table(["trigger", "on events", "matching", "state", "what it does"],
                                 triggers)]
    return "\n".join(lines) + "\n"
