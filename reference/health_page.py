"""The training-health detectors, from their code (flows/health/detectors.py) and their
settings (flows/config/health.py): what each reads, why it fires, and its thresholds with the
defaults and the reasons for them."""

from __future__ import annotations

import inspect

from pydantic import BaseModel

from flows.config.health import POLICIES, HealthSection
from flows.health import detectors
from reference.markdown import cell, table

_FUNCTIONS = {"kl_runaway": detectors.runaway, "grad_norm_runaway": detectors.runaway}


def _settings_rows(name: str) -> list[list[str]]:
    section = HealthSection()
    settings: BaseModel = getattr(section, name)
    rows = []
    for field, info in type(settings).model_fields.items():
        default = getattr(settings, field)
        rows.append([f"`health.{name}.{field}`", f"`{default}`", cell(info.description or "")])
    return rows


def render() -> str:
    lines = ["# Training-health detectors", "",
             "Generated from `flows/health/detectors.py` and `flows/config/health.py` by "
             "`python -m reference`; do not edit by hand. Every detector runs on every "
             "training; the profile's `health:` section chooses what a finding does: "
             + ", ".join(f"`{p}`" for p in POLICIES) + " (default `hold`). What they can and "
             "cannot catch: [the explanation](../explanation/training-health.md); a held run: "
             "[the how-to](../how-to/held-run.md). Each finding is a `tpurl.train.suspect` "
             "event ([events](events.md)).", ""]
    fields = HealthSection.model_fields
    for name in detectors.DETECTORS:
        function = _FUNCTIONS.get(name, getattr(detectors, name))
        doc = inspect.getdoc(function) or ""
        lines += [f"## `{name}`", "", cell(fields[name].description or ""), "",
                  " ".join(doc.split()), ""]
        if name in _FUNCTIONS:
            tag = detectors.KL if name == "kl_runaway" else detectors.GRAD_NORM
            lines += [f"Reads `{tag}`.", ""]
        lines += table(["setting", "default", "why"], _settings_rows(name))
        lines.append("")
    return "\n".join(lines)
