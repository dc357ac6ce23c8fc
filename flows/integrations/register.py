"""A judged model into the profile's registry (``promotion.register``), best effort.

MLflow takes every judged model (a rejected one with its decision, never the alias); Vertex
AI and the Hub take promoted models only: a version there is something a team deploys. A
rerun whose model is already the promoted one registers nothing again. Like every report,
a registry that does not answer is a warning after retries, never a failed run: the
promoted pointer (flows/runpage/promotion.py) is already written.
"""

from __future__ import annotations

from collections.abc import Callable

from flows.config.profile import Profile
from flows.core.storage import Storage
from flows.integrations.judged_model import JudgedModel
from flows.integrations.reporting import DELAYS_S, report

ATTEMPTS = 4


def register_judged(profile: Profile, model: JudgedModel, storage: Storage,
                    warn: Callable[[str], None] | None = None,
                    delays_s: tuple[float, ...] = DELAYS_S) -> str | None:
    """Where the model was registered ("mlflow:NAME/3", a Vertex model version, a hub
    commit), or None when there is no registry, nothing to register, or it failed."""
    rule = profile.promotion_rule
    section = rule.register if rule is not None else None
    if section is None:
        return None
    project = profile.gke.project if profile.gke else None
    if section.mlflow is not None:
        from flows.integrations.mlflow_registry import register_version

        config = section.mlflow
        version = report("MLflow model registry",
                         lambda: register_version(config, model, project), ATTEMPTS, delays_s,
                         warn)
        return f"mlflow:{config.model_name}/{version}" if version else None
    if not model.promoted:
        return None
    if section.vertex is not None:
        from flows.integrations.vertex_registry import promote_version

        vertex = section.vertex
        return report("Vertex AI Model Registry", lambda: promote_version(vertex, model),
                      ATTEMPTS, delays_s, warn)
    assert section.hub is not None
    from flows.integrations.hub_registry import upload_revision

    hub = section.hub
    return report("Hugging Face Hub", lambda: upload_revision(hub, model, storage, project),
                  ATTEMPTS, delays_s, warn)
