"""Where a secret comes from, never the secret itself: the hub token, and every
integration's credential (a W&B API key, an MLflow token), named the same way, resolved at
the last moment (flows/core/secrets.py) and redacted wherever it could show."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Self

from pydantic import BaseModel, model_validator

from flows.config import gcp_names as names
from flows.config.errors import FixableValueError
from flows.config.limits import limits
from flows.config.section_base import StrictModel
from flows.config.wandb_key import looks_like_wandb_key


class SecretRef(StrictModel):
    """Where a secret comes from. Never the secret itself."""

    env: str | None = None
    """The name of an environment variable holding the token (e.g. HF_TOKEN)."""
    secret_block: str | None = None
    """The name of a Prefect Secret block holding the token."""
    gcp_secret: str | None = None
    """A Secret Manager secret of the profile's project (its latest version)."""

    @model_validator(mode="after")
    @limits({"": "exactly one of env, secret_block, gcp_secret",
             "env": f"{names.ENV_VAR_LIMIT}; not a token or key itself",
             "secret_block": f"a block name: {names.BLOCK_NAME_LIMIT}; not a token or key itself",
             "gcp_secret": f"a secret id: {names.SECRET_ID_LIMIT}; not a token or key itself"})
    def _exactly_one(self) -> Self:
        for source in ("env", "secret_block", "gcp_secret"):  # the value where a name goes
            if names.looks_like_hf_token(getattr(self, source) or ""):  # (never quoted back)
                raise FixableValueError(
                    f"{source} holds what looks like the token itself, not the name of "
                    "where it is kept. It looks like a live token: revoke it on the hub.",
                    "put the new token in an environment variable, a Prefect Secret block or "
                    "Secret Manager and name that, e.g. {env: HF_TOKEN}")
            if looks_like_wandb_key(getattr(self, source) or ""):  # checked before its name
                raise FixableValueError(  # rules, whose messages quote the value
                    f"{source} holds what looks like a W&B API key itself, not the name of "
                    "where it is kept. It looks like a live key: revoke it at "
                    "wandb.ai/authorize",
                    "put the new key in an environment variable or a secret and name that, "
                    "e.g. {env: WANDB_API_KEY}")
        if sum(v is not None for v in (self.env, self.secret_block, self.gcp_secret)) != 1:
            raise FixableValueError(
                "give exactly one source for the token",
                "write {env: HF_TOKEN} (an environment variable name), {secret_block: NAME} "
                "(a Prefect Secret block) or {gcp_secret: NAME} (GCP Secret Manager)",
            )
        if self.gcp_secret is not None and (problem := names.secret_id_problem(self.gcp_secret)):
            raise FixableValueError(problem, "name the secret as in `gcloud secrets list`")
        if self.env is not None and (problem := names.env_var_problem(self.env)):
            raise FixableValueError(problem, "name the variable, e.g. {env: HF_TOKEN}")
        if self.secret_block is not None and (problem := names.block_name_problem(self.secret_block)):
            raise FixableValueError(problem, "name a Prefect Secret block, e.g. {secret_block: hf-token}")
        return self

    def describe(self) -> str:
        if self.env:
            return f"env:{self.env}"
        if self.gcp_secret:
            return f"gcp-secret-manager:{self.gcp_secret}"
        return f"prefect-secret:{self.secret_block}"


def secret_refs(value: Any, at: str = "") -> Iterator[tuple[str, SecretRef]]:
    """Every secret reference below ``value`` (a profile, any section), with its dotted
    field: whatever names a secret is found, including a section added later, so nothing
    that redacts by the profile's references (the support bundle) misses one."""
    if isinstance(value, SecretRef):
        yield at, value
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from secret_refs(getattr(value, name), f"{at}.{name}" if at else name)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from secret_refs(item, f"{at}.{key}" if at else str(key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from secret_refs(item, f"{at}[{index}]")
