"""The MLflow Model Registry: every judged model a version of the profile's
registered model, the promoted one moved under the alias ``champion``.

A version's source is the export's URI; its tags carry the scores, the lineage and the
decision, so a rejected model is on record with why, and never gets the alias. A retried
registration finds the version it made by the flow run's id (tag ``tpurl.flow_run_id``),
so a retry never makes a second version. API: mlflow/tracking/client.py
(create_registered_model, create_model_version, set_registered_model_alias,
get_model_version_by_alias, search_model_versions) of MLflow 3.17.
"""

from __future__ import annotations

from typing import Any

from flows.config.registry import MlflowRegistry
from flows.integrations.judged_model import JudgedModel
from flows.integrations.mlflow_client import mlflow_client

CHAMPION = "champion"


def version_tags(model: JudgedModel) -> dict[str, str]:
    """Pure: the tags a version carries."""
    tags = {"tpurl.profile": model.profile, "tpurl.run": model.run,
            "tpurl.flow_run_id": model.flow_run_id, "tpurl.decision": model.decision,
            "tpurl.decision_reason": model.reason[:5000], "tpurl.model_uri": model.export_uri}
    tags.update({f"score.{k}": f"{v:.6g}" for k, v in model.scores.items()})
    tags.update({f"base_score.{k}": f"{v:.6g}" for k, v in model.base_scores.items()})
    tags.update({f"lineage.{k}": v for k, v in model.lineage.items() if v})
    return tags


def register_version(config: MlflowRegistry, model: JudgedModel,
                     project: str | None = None) -> str:
    """The version's number (made now or found from an earlier try); the champion alias
    moved to it when it was promoted."""
    from mlflow.exceptions import MlflowException

    client = mlflow_client(config.tracking_uri, config.token, project)
    try:
        client.create_registered_model(config.model_name, description=(
            f"Models trained by the tpu-rl-pipeline profile {model.profile}"))
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    found = [v for v in client.search_model_versions(f"name = '{_quoted(config.model_name)}'")
             if v.tags.get("tpurl.flow_run_id") == model.flow_run_id]
    if found:
        version = found[0]
    else:
        source, run_id = _source(client, config, model)
        version = client.create_model_version(
            config.model_name, source, run_id=run_id, tags=version_tags(model),
            description=f"{model.decision}: {model.reason}"[:5000])
    if model.promoted:
        client.set_registered_model_alias(config.model_name, CHAMPION, version.version)
    return str(version.version)


def _source(client: Any, config: MlflowRegistry, model: JudgedModel) -> tuple[str, str | None]:
    """The version's source: the export's URI where the server's readers can reach it
    (gs://, hf://). A file:// export (the rehearsal) is a path on this machine only, which
    an MLflow server refuses as a source unless it lies in a run's artifacts
    (mlflow/server/handlers.py ``_validate_source_run``): it is uploaded as the artifacts of
    a registration run and registered from there; the tag ``tpurl.model_uri`` keeps the
    export's own URI either way."""
    if not model.export_uri.startswith("file://"):
        return model.export_uri, None
    from flows.core.storage import LocalStorage

    name = f"{config.model_name} registrations"
    experiment = client.get_experiment_by_name(name)
    experiment_id = (experiment.experiment_id if experiment is not None
                     else client.create_experiment(name))
    run = client.create_run(experiment_id, run_name=f"register {model.run}",
                            tags={"tpurl.flow_run_id": model.flow_run_id})
    client.log_artifacts(run.info.run_id, str(LocalStorage().local_path(model.export_uri)), "export")
    client.set_terminated(run.info.run_id, "FINISHED")
    return f"{run.info.artifact_uri}/export", str(run.info.run_id)


def champion(config: MlflowRegistry, project: str | None = None) -> Any | None:
    """The version under the champion alias (its ``source`` and ``tags``), or None."""
    from mlflow.exceptions import MlflowException

    client = mlflow_client(config.tracking_uri, config.token, project)
    try:
        return client.get_model_version_by_alias(config.model_name, CHAMPION)
    except MlflowException as exc:
        if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            return None
        raise


def promoted_version(config: MlflowRegistry, run: str, project: str | None = None) -> str | None:
    """The number of the version that ``run``'s promotion registered (tags ``tpurl.run`` and
    ``tpurl.decision`` = promoted, as :func:`version_tags` writes them), newest first; None
    when the registry holds none, so a rollback can refuse before it changes anything."""
    client = mlflow_client(config.tracking_uri, config.token, project)
    found = [v for v in client.search_model_versions(f"name = '{_quoted(config.model_name)}'")
             if v.tags.get("tpurl.run") == run and v.tags.get("tpurl.decision") == "promoted"]
    if not found:
        return None
    return str(max(found, key=lambda v: int(v.version)).version)


def move_champion(config: MlflowRegistry, version: str, project: str | None = None) -> None:
    """Point the alias ``champion`` at ``version`` (a rollback; the version is kept)."""
    client = mlflow_client(config.tracking_uri, config.token, project)
    client.set_registered_model_alias(config.model_name, CHAMPION, version)


def _quoted(name: str) -> str:
    return name.replace("'", "\\'")
