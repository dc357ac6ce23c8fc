"""Every fix text that names a profile field names one the profile model has.

The missing-LocalQueue diagnosis told users to "set gke.local_queue", which `tpurl validate`
refuses (the field is gke.kueue_queue). Fix texts are built from string constants (plain or
f-string pieces) anywhere under flows/, so this walks every string constant of every module,
a superset of every diagnosis, issue and validation fix the code can produce, and checks
each ``section.field`` it names against the pydantic models.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from pydantic import BaseModel

import flows
from flows.config.gke import RETIRED_KEYS
from flows.config.profile import Profile

ROOT = Path(flows.__file__).parent


def _model(annotation: object) -> type[BaseModel] | None:
    """The section's model, also when it is optional (``GkeSection | None``)."""
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


SECTIONS = {name for name, info in Profile.model_fields.items() if _model(info.annotation)}
# digits too: gke.cluster_toolkit_sha256 was never matched by [a-z_]+ (no \b before "256")
NAMED = re.compile(rf"(?<![\w./-])({'|'.join(sorted(SECTIONS))})\.([a-z0-9_]+)\b")
# Names of this shape that are files, not fields: the checkpoint file and a module name.
NOT_FIELDS = {"model.safetensors", "image.py"}


def section_fields(section: str) -> set[str]:
    model = _model(Profile.model_fields[section].annotation)
    assert model is not None
    return set(model.model_fields)


def named_fields() -> list[tuple[str, int, str]]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for m in NAMED.finditer(node.value):
                    found.append((str(path.relative_to(ROOT.parent)), node.lineno, m.group(0)))
    return found


def test_the_walk_sees_the_fix_texts() -> None:
    names = {name for _, _, name in named_fields()}
    assert {"gke.queue_budget_s", "gke.preemption_budget", "local.root", "image.builder",
            "data.train_files"} <= names  # the walk reaches diagnoses, validation and issues


def test_every_named_field_exists_in_the_profile_model() -> None:
    wrong = []
    for where, line, name in named_fields():
        section, field = name.split(".")
        if name in NOT_FIELDS or name in RETIRED_KEYS:  # retired keys are named to be removed
            continue
        if field not in section_fields(section):
            wrong.append(f"{where}:{line}: {name}")
    assert not wrong, "fix texts name fields the profile does not have:\n" + "\n".join(wrong)


def test_a_cli_fix_never_offers_a_variable_no_shell_can_export() -> None:
    """gke.prices.on-demand.source would be TPURL_GKE__PRICES__ON-DEMAND__SOURCE: bash's
    `export` refuses the name, so the terminal's fix offers --set alone."""
    import re

    from flows.config.loading import how_to_set

    assert how_to_set("gke.prices.on-demand.source", "cli") == \
        "pass --set gke.prices.on-demand.source=VALUE"
    for field in ("gke.project", "gke.prices.spot.usd_per_chip_hour", "flow_timeout_s"):
        names = re.findall(r"TPURL_\S+", how_to_set(field, "cli"))
        assert names and all(re.fullmatch(r"TPURL_[A-Z0-9_]+\)?", n) for n in names)


# ``train.args.KEY`` (and model, convert, export): a MaxText argument, checked against the
# pinned program's accepted keys. f-string pieces end in ``args.`` with the key after it, so
# only a whole key is matched: not a piece ending in ``_``, nor a family (``ici_*``).
ARGS_NAMED = re.compile(r"(?<![\w./-])(model|train|convert|export)\.args\.([a-z][a-z0-9_]*[a-z0-9])\b(?!\*)")


def test_every_named_maxtext_argument_is_one_its_program_accepts() -> None:
    """A fix that names ``train.args.sampler_devices_fraction`` is followed with ``--set``:
    a misspelt key would be refused as not an argument of train_rl."""
    from flows.config.maxtext_keys import STEP_PROGRAMS, unknown_key

    wrong, seen = [], set()
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for m in ARGS_NAMED.finditer(node.value):
                    seen.add(m.group(0))
                    if all(unknown_key(m.group(2), program) is not None
                           for program in STEP_PROGRAMS[m.group(1)]):
                        wrong.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: "
                                     f"{m.group(0)}")
    assert {"train.args.sampler_devices_fraction", "train.args.rollout_tensor_parallelism",
            "train.args.max_target_length"} <= seen
    assert not wrong, "fix texts name MaxText arguments no program accepts:\n" + "\n".join(wrong)
