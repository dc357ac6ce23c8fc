"""Resolve secret references at the last moment, and keep their values out of every text.

Values are held only in the environment handed to a workload; every value resolved is
registered with flows/core/redaction.py, which takes it out of everything logged or kept.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from flows.common.failure_codes import Failure
from flows.config.profile import Profile, SecretRef
from flows.core.redaction import MIN_LENGTH, REDACTED, Redactor, register

__all__ = ["REDACTED", "Redactor", "SecretTooShort", "SecretUnavailable", "require_secrets",
           "resolve"]


class SecretUnavailable(RuntimeError):
    category = Failure.CONFIG_SECRET_UNAVAILABLE


class SecretTooShort(SecretUnavailable):
    """The reference resolves to a value too short to be a token: refused rather than used,
    since the registry cannot redact it (flows/core/redaction.py MIN_LENGTH: blanking every
    "abc" would mangle every log) and no real token is that short (a placeholder, a
    truncated export)."""

    category = Failure.CONFIG_SECRET_TOO_SHORT


def resolve(ref: SecretRef, environ: Mapping[str, str] | None = None,
            project: str | None = None) -> str:
    """The value, registered for redaction (flows/core/redaction.py) before it is returned:
    whoever holds it next, nothing this process writes shows it."""
    value = _lookup(ref, environ, project)
    if len(value.strip()) < MIN_LENGTH:
        raise SecretTooShort(
            f"{ref.describe()} holds {len(value.strip())} character(s), too short to be a real "
            f"token and to be kept out of the logs (under {MIN_LENGTH}); set the real token "
            "there (a Hugging Face token is hf_ and 34 more characters)")
    register(value)
    return value


def _lookup(ref: SecretRef, environ: Mapping[str, str] | None, project: str | None) -> str:
    env = os.environ if environ is None else environ
    if ref.gcp_secret is not None:
        return _from_secret_manager(ref.gcp_secret, project)
    if ref.env is not None:
        value = env.get(ref.env)
        if not value:
            raise SecretUnavailable(f"the environment variable {ref.env} is not set; export it "
                                    "(its value is never logged) or name a Prefect Secret block")
        return value
    from prefect.blocks.system import Secret

    assert ref.secret_block is not None, "a SecretRef names exactly one source"
    try:
        block = Secret.load(ref.secret_block)
        # typed as the block or a coroutine (Prefect's async dispatch): called from sync
        # code, as here, it is the block
        assert isinstance(block, Secret)
        return str(block.get())
    except ValueError as exc:
        raise SecretUnavailable(f"no Prefect Secret block named {ref.secret_block!r}: create it "
                                f"with `prefect block create secret` ({exc.__class__.__name__})"
                                ) from None


def _from_secret_manager(name: str, project: str | None) -> str:
    """The latest version of a Secret Manager secret, through prefect-gcp's GcpSecret."""
    from prefect_gcp import GcpCredentials
    from prefect_gcp.secret_manager import GcpSecret

    try:
        value = GcpSecret(gcp_credentials=GcpCredentials(project=project),
                          secret_name=name).read_secret()
    except Exception as exc:
        raise SecretUnavailable(
            f"Secret Manager secret {name!r} could not be read ({type(exc).__name__}); create it "
            "with `gcloud secrets create` and grant the flow's service account "
            "roles/secretmanager.secretAccessor on that secret alone (`tpurl flow-identity "
            "PROFILE --identity runtime` prints the grant)") from None
    return value.decode() if isinstance(value, bytes) else str(value)


K8S_SECRET = "tpurl-hf-token"  # deployments/work-pool/kubernetes-base-job-template.json maps it
# Every variable the Kubernetes work pool's base job template sets from a Secret of the pool's
# namespace (each optional: a pod starts without it, and the flow's start check says which
# is missing): the HF token, and the W&B key of docs/integrations/wandb.md's {env:
# WANDB_API_KEY}.
POD_SECRETS: dict[str, str] = {"HF_TOKEN": K8S_SECRET, "WANDB_API_KEY": "tpurl-wandb-api-key"}


def pod_secret_fix(ref: SecretRef, field: str, environ: Mapping[str, str],
                   profile: str | None = None) -> str | None:
    """In a Kubernetes work pool's pod, how an ``{env: NAME}`` reference gets its value: the
    Secret the pool of ``profile``'s flow pods maps to NAME (:func:`pool_secret`), created
    once in the pool's namespace; for a name the template maps nothing to, another kind of
    reference. None outside a pod or for another kind of reference."""
    if ref.env is None or not environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    if ref.env not in POD_SECRETS:
        return (f"this flow runs in a Kubernetes pod, whose work pool sets no {ref.env}: use "
                f"{field}: {{secret_block: NAME}} or {{gcp_secret: NAME}}, or reference one of "
                f"the variables the pool maps ({', '.join(sorted(POD_SECRETS))})")
    return (f"this flow runs in a Kubernetes pod: create the Secret once in the work pool's "
            f"namespace (kubectl create secret generic {pool_secret(ref.env, profile)} "
            f"--from-literal=value=${ref.env}); the pool's base job template maps it to "
            f"{ref.env}. Or use {field}: {{secret_block: NAME}}")


def team_pool_secret(variable: str, team: str | None) -> str:
    """The Secret a flow pod of ``team``'s own work pool (deployments/work-pool/teams/TEAM/)
    reads ``variable`` from: the shared pool's name with the team after ``tpurl-``
    (``tpurl-team-TEAM-hf-token``), so one team's pod never reads another's; the shared
    pool's :data:`POD_SECRETS` name for a profile in no team. Pure."""
    shared = POD_SECRETS[variable]
    return f"tpurl-team-{team}-{shared.removeprefix('tpurl-')}" if team else shared


def pool_secret(variable: str, profile: str | None) -> str:
    """:func:`team_pool_secret` for ``profile``'s team. For the fix text only: a teams file
    that does not load, or no profile, names the shared pool's Secret."""
    from flows.config.errors import ProfileError
    from flows.config.teams import load_teams

    try:
        team = load_teams().team_of(profile) if profile else None
    except ProfileError:
        team = None
    return team_pool_secret(variable, team.name if team else None)


def require_secrets(profile: Profile, environ: Mapping[str, str] | None = None) -> None:
    """Every secret reference of the profile resolves where this flow runs (a Kubernetes
    work pool's pod included), or ProfileError naming the field and the fix; values are
    read and dropped, never kept or logged."""
    from flows.common.issues import Issue
    from flows.config.errors import ProfileError

    ref = profile.model.hf_token
    if ref is None:
        return
    env = os.environ if environ is None else environ
    try:
        resolve(ref, env, project=profile.gke.project if profile.gke else None)
    except SecretTooShort as exc:
        raise ProfileError(profile.name, [Issue("model.hf_token", f"{ref.describe()} is not a "
                                                "usable token", str(exc), exc.category)]) from None
    except SecretUnavailable as exc:
        fix = pod_secret_fix(ref, "model.hf_token", env, profile.name) or str(exc)
        raise ProfileError(profile.name, [Issue("model.hf_token", f"{ref.describe()} is not "
                                                "available where the flow runs", fix,
                                                Failure.CONFIG_SECRET_UNAVAILABLE)]) from None
