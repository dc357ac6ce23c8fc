"""Unvouched values: the dataset and base-model revision a deployment's run brings itself (the
retrain flow's ``dataset_uri`` and ``model_revision``, or its ``overrides``) pass the same
rules as an announcement (flows/config/uri_and_revision_rules.py), whoever created the run: the
dispatcher, the UI's run form, `prefect deployment run`, an API client. Checked by the
profile loader, so no route into a retrain run skips them.

Trusted, so not checked: the value the profile file holds (its default when unset) and the
value the deployment itself was created with (prefect.yaml's ``parameters``, the deploying
operator's, as load_profile's ``deployed``). Any other value is the run's, including one a
``TPURL_`` variable brings: a run may pass its own job variables (its environment among
them), and the flow cannot tell those from the deployment's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.config.profile import Profile
from flows.config.uri_and_revision_rules import dataset_uri_problem, revision_problem

CATEGORY = Failure.CONFIG_UNVOUCHED_VALUE
REVISION, DATASET = "model.hf_revision", "data.train_files"


def _dataset(profile: Profile, value: str) -> str | None:
    return dataset_uri_problem(value, profile.backend,
                               profile.announcements.allowed_uri_prefixes, profile.name)


RULES: dict[str, Callable[[Profile, str], str | None]] = {
    REVISION: lambda _profile, value: revision_problem(value),
    DATASET: _dataset,
}


def value_at(data: Mapping[str, Any], dotted: str) -> Any:
    """The value at a dotted path of a profile's raw fields (None when absent)."""
    node: Any = data
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def _default(dotted: str) -> Any:
    section, name = dotted.split(".")
    annotation = Profile.model_fields[section].annotation
    # the announced fields' sections are models; pydantic types a field's annotation as any
    # type or none
    return annotation.model_fields[name].default  # type: ignore[union-attr]


def trusted_values(file_data: Mapping[str, Any],
                   deployed: Mapping[str, Any] | None) -> dict[str, set[Any]]:
    """Per checked field, the values the profile file and the deployment vouch for."""
    out: dict[str, set[Any]] = {}
    for dotted in RULES:
        written = value_at(file_data, dotted)
        values = [_default(dotted) if written is None else written]
        if deployed and dotted in deployed:
            values.append(deployed[dotted])
        # as text: a file may hold a list or a number there (validation names it later)
        out[dotted] = {str(v) if v is not None else None for v in values}
    return out


def unvouched_issues(profile: Profile, trusted: Mapping[str, set[Any]]) -> list[Issue]:
    """One issue per checked field whose value neither the file nor the deployment gave and
    which fails its rule (pure)."""
    issues = []
    for dotted, rule in RULES.items():
        value = value_at(profile.model_dump(), dotted)
        if value is None or str(value) in trusted.get(dotted, set()):
            continue
        if (problem := rule(profile, str(value))) is not None:
            what, _sep, fix = problem.partition("; fix: ")
            issues.append(Issue(dotted, what, fix, CATEGORY))
    return issues
