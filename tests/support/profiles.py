"""The tutorial profile's name and the required fields the tests fill in, and a fake HF token.

One place for them so every test directory loads the same tutorial profile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flows.backends.gke.infra.settings import InfraSettings, settings_from_profile
from flows.config import Profile, load_profile
from flows.config.gke import GkeSection
from flows.config.loading import resolve_profile_path
from flows.config.profile_file import read_profile_file

TUTORIAL = "qwen3-30b-a3b-v6e-32"
TUTORIAL_REQUIRED = {
    "gke.project": "my-proj-123",
    "gke.region": "us-east5",
    "gke.zone": "us-east5-b",
    "gke.cluster": "tpurl-v6e",
    "gke.bucket": "my-tpurl-bucket",
    "gke.reservation": "my-v6e-reservation",
    "gke.authorized_cidr": "203.0.113.0/24",
}
# The infra tests name the reservation the fake cloud has (tests/fakes/cloud/apis.py).
INFRA_OVERRIDES = {**TUTORIAL_REQUIRED, "gke.reservation": "my-v6e-res"}


def fake_hf_token(label: str) -> str:
    """A value shaped like a Hugging Face token (so leak checks and the literal-token guard
    treat it as one), built at run time so no token-shaped literal sits in the repository."""
    body = (label + "0123456789" * 4)[:34]
    return "hf" + "_" + body


def tutorial_profile(**overrides: str) -> Profile:
    return load_profile(TUTORIAL, {**TUTORIAL_REQUIRED, **overrides}, environ={})


def infra_profile(**overrides: str) -> Profile:
    return load_profile(TUTORIAL, {**INFRA_OVERRIDES, **overrides}, environ={})


def with_gke(settings: InfraSettings, **fields: Any) -> InfraSettings:
    """The same runtime settings for a profile whose gke section differs in ``fields``
    (validated like a profile: a test cannot build a section the loader would refuse)."""
    gke = GkeSection.model_validate({**settings.gke.model_dump(), **fields})
    return settings.model_copy(update={"gke": gke})


# A price for the modes that ship none (flows/config/capacity.py: spot and flex-start).
QUOTED_PRICE = {"usd_per_chip_hour": "1.0", "source": "a quote", "as_of": "2026-12-01"}


def capacity_overrides(mode: str) -> dict[str, str]:
    """What a profile sets to use capacity ``mode`` (or a chain, ``flex-start,on-demand``): no
    reservation unless the chain has one, a quoted price where none ships, max_run_hours
    for flex-start and queued."""
    chain = mode.split(",")
    extra: dict[str, str] = {"gke.capacity": mode}
    if "reservation" not in chain:
        extra["gke.reservation"] = ""
    for one in chain:
        if one in ("spot", "flex-start", "queued"):
            extra.update({f"gke.prices.{one}.{k}": v for k, v in QUOTED_PRICE.items()})
    if {"flex-start", "queued"} & set(chain):
        extra["gke.max_run_hours"] = "12"
    return extra


def capacity_profile(mode: str, **overrides: str) -> Profile:
    """The infra tests' tutorial profile in capacity ``mode`` (and any further fields)."""
    return infra_profile(**{**capacity_overrides(mode), **overrides})


SMOKE = "smoke-qwen3-0.6b-v6e-8"
# The smoke profile leaves the same fields empty as the tutorial's, except the reservation:
# its capacity (on-demand) consumes none.
SMOKE_REQUIRED = {k: v for k, v in TUTORIAL_REQUIRED.items() if k != "gke.reservation"}


def smoke_profile(**overrides: str) -> Profile:
    return load_profile(SMOKE, {**SMOKE_REQUIRED, **overrides}, environ={})


def required_overrides(name: str) -> dict[str, str]:
    """What a shipped profile leaves for the user to fill in (its empty fields), per profile
    name or file path: a local one (the rehearsals) none; a GKE profile the tutorial's,
    without the reservation unless its capacity consumes one (the smoke, Llama and Gemma
    profiles run on demand)."""
    text = read_profile_file(resolve_profile_path(name))
    if text.get("backend") == "local":
        return {}
    gke = text.get("gke") or {}
    chain = str(gke.get("capacity") or "reservation").split(",")
    return dict(TUTORIAL_REQUIRED if "reservation" in chain else SMOKE_REQUIRED)


def settings_with_teams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, teams: str,
                        profile: str) -> InfraSettings:
    """The infra settings of ``profile`` (the tutorial's, or a shipped one with the smoke's
    required fields) under a teams file holding ``teams``, as one member of a shared
    cluster deploys it."""
    path = tmp_path / "teams.yaml"
    path.write_text(teams)
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(path))
    loaded = tutorial_profile() if profile == TUTORIAL else load_profile(
        profile, SMOKE_REQUIRED, environ={})
    return settings_from_profile(loaded, cache_dir=tmp_path / "cache")
