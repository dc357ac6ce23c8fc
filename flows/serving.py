"""An example consumer of ``tpurl.model.promoted``: the step that would point a serving
endpoint at the newly promoted model. Here it only records the URI it was given.

Why a flow of its own: the automation in deployments/automations/serve-on-promoted.yaml runs
a deployment of it on every promotion, so serving changes only when the promotion rule
passed, never on a bare export. It records ``served.json`` beside the promoted pointer
(flows/runpage/promotion.py) and refuses a URI that is not the promoted one: an event
replayed late, after a newer promotion, must not roll serving back. The pointer itself lives
in a bucket every training pod can write, so it is checked before anything is served: it must
carry its scores' key and its export's digest, name an export inside the output root, and the
export's files must still give that digest. With an MLflow registry
(``promotion.register.mlflow``) the registry's ``champion`` alias is what is served instead
of the pointer, under the same digest rule.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from prefect import flow, get_run_logger

from flows.backends import backend_for
from flows.config import load_profile
from flows.config.loading import require_profile_name
from flows.config.profile import Profile
from flows.config.registry import MlflowRegistry
from flows.core.error_redaction import redacting_errors
from flows.core.manifest import build_manifest, manifest_digest
from flows.core.promotion_store import pointer_uris, read_promoted
from flows.core.storage import Storage, join
from flows.deployed.declared import deployment_declared
from flows.deployed.run_choices import refuse_run_choices
from flows.flow_runs.run_origin import run_origin
from flows.integrations.mlflow_registry import champion
from flows.runpage.promotion import pointer_problem


@flow(name="record-promoted-model")
@redacting_errors
def record_promoted_model(profile: str, model_uri: str, run: str = "") -> str:
    """Record the promoted model as the one to serve.

    Args:
        profile: The profile whose model was promoted (the event's tpurl.profile label): a
            shipped profile's name, never a path.
        model_uri: The promoted HF export (the event's payload model_uri).
        run: The flow run that produced it (the event's payload run).
    """
    # A deployment's run: its job variables only repeat the deployment's, a profile the
    # deployment declares binds (the automation passes the event's otherwise), and TPURL_
    # fields of the environment the deployment did not set obey the run-tunable rule.
    origin = run_origin()
    declared = deployment_declared()
    refuse_run_choices(declared, {"profile": profile}, profile_fixed=False)
    # an event's label or a run form's field: a shipped profile's name, never a path
    require_profile_name(profile)
    cfg = load_profile(profile, origin=origin, deployed_env=declared.env)
    storage = backend_for(cfg).storage
    registry = cfg.promotion_rule.register if cfg.promotion_rule else None
    if registry is not None and registry.mlflow is not None:
        _check_champion(cfg, storage, registry.mlflow, model_uri)
    else:
        _check_pointer(cfg, storage, model_uri)
    served = join(pointer_uris(cfg)[0].rsplit("/", 1)[0], "served.json")
    storage.write_text(served, json.dumps({"model_uri": model_uri, "run": run,
                                           "recorded_at": datetime.now(UTC).isoformat()}))
    get_run_logger().info("would point the serving endpoint at %s; recorded in %s",
                          model_uri, served)
    return served


def _check_pointer(cfg: Profile, storage: Storage, model_uri: str) -> None:
    current = read_promoted(storage, cfg)
    if current is None or current.model_uri != model_uri:
        raise ValueError(f"{model_uri} is not the promoted model of {cfg.name} (the pointer "
                         f"says {current.model_uri if current else 'nothing'}); not serving it")
    if why := pointer_problem(storage, cfg, current):
        raise ValueError(f"the promoted pointer of {cfg.name} is not trusted: {why}; not "
                         "serving it. Rerun the pipeline to judge and promote the model again")


def _check_champion(cfg: Profile, storage: Storage, registry: MlflowRegistry,
                    model_uri: str) -> None:
    """With an MLflow registry the champion alias is what is served: the URI must be its
    version's source, and the export's files must still give the digest it was registered
    with (the same trust rule as the pointer's: a training pod can
    write the bucket)."""
    version = champion(registry, cfg.gke.project if cfg.gke else None)
    source = version.tags.get("tpurl.model_uri") if version is not None else None
    if version is None or source != model_uri:
        raise ValueError(f"{model_uri} is not the champion of {registry.model_name} in the "
                         f"MLflow registry (the champion is {source or 'nobody yet'}); not "
                         "serving it")
    digest = version.tags.get("lineage.export_digest", "")
    found = manifest_digest(build_manifest(storage, model_uri))
    if not digest or found != digest:
        raise ValueError(f"the champion {registry.model_name}/{version.version} is not "
                         f"trusted: the export {model_uri} no longer matches its registered "
                         f"digest ({found}, registered {digest or 'none'}); not serving it")
