"""Where a run's curves, walls and costs are also reported: the ``tracking:``
section, every part optional and off by default.

Reporting never decides anything: a tracker that is down mid-run is a warning and a retry,
never a failed stage (flows/integrations/). What can be known before a run starts is checked
then: the URIs' shapes here, at load; that the server answers and the credentials resolve in
flows/integrations/preflight.py, before the first stage.
"""

from __future__ import annotations

import re
from typing import Annotated, Self

from pydantic import Field, model_validator

from flows.config.errors import FixableValueError
from flows.config.limits import limits
from flows.config.secret_ref import SecretRef
from flows.config.section_base import StrictModel
from flows.config.types import Checked, one_of, refusing
from flows.config.wandb_key import looks_like_wandb_key

_TRACKING_URI = re.compile(r"https?://[A-Za-z0-9.\-\[\]:]+(/[^\s]*)?")
_VERTEX_TENSORBOARD = re.compile(
    r"projects/[^/\s]+/locations/[a-z0-9-]+/tensorboards/[0-9]+")
_WANDB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
WANDB_MODES = ("online", "offline")
# what tracking_uri_problem refuses, in words (TrackingUri carries it into the JSON schema)
TRACKING_URI_LIMIT = "an http(s):// address, no credentials, query string or fragment"


CREDENTIALS_FIX = ("write the address without them (e.g. tracking_uri: https://mlflow.corp) and "
                   "give a token as a secret reference, token: {env: MLFLOW_TRACKING_TOKEN} (or "
                   "secret_block / gcp_secret); a user and password go in MLflow's own "
                   "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD where the flow runs. "
                   "Rotate the credential: it was written where others can read it")
ADDRESS_FIX = "write the server's address, e.g. tracking_uri: http://mlflow.internal:5000"


def shown_uri(uri: str) -> str:
    """The URI as a message may quote it: whatever stands before an '@' in the address and
    everything after a '?' or '#' blanked, since either may be a credential. Pure."""
    scheme, sep, rest = uri.partition("://")
    if sep:
        authority, slash, path = rest.partition("/")
        if "@" in authority:
            authority = "***@" + authority.rsplit("@", 1)[1]
        uri = f"{scheme}://{authority}{slash}{path}"
    for mark in "?#":
        if mark in uri:
            uri = uri.split(mark, 1)[0] + f"{mark}***"
    return uri


def tracking_uri_problem(uri: str) -> tuple[str, str] | None:
    """(problem, fix) of an address that is not an MLflow server's; never the address as
    written when it may hold a credential (a refusal is printed, and in a run logged).

    An MLflow server is reached over HTTP(S); a file store would be written by every worker on
    its own disk. Credentials in the address (``user:password@``, ``token@``, a query's
    ``?token=``) are refused: the address is logged, linked from the run page and kept in
    the result, where the token would be too. A query string or fragment has no place in it
    anyway: MLflow appends its API paths to the address as it is
    (mlflow/utils/rest_utils.py 3.17.2: ``url = f"{cleaned_hostname}{endpoint}"``)."""
    authority = uri.partition("://")[2].split("/", 1)[0]
    if "@" in authority:
        return ("the address carries credentials (before the '@'); they would be logged and "
                f"kept with every run's link: {shown_uri(uri)!r}", CREDENTIALS_FIX)
    if "?" in uri or "#" in uri:
        return ("the address carries a query string or fragment, where a token would be logged "
                "and kept with every run's link, and which MLflow would put before its API "
                f"paths: {shown_uri(uri)!r}", CREDENTIALS_FIX)
    if not _TRACKING_URI.fullmatch(uri):
        return (f"{shown_uri(uri)!r} is not an http(s):// address of an MLflow tracking server",
                ADDRESS_FIX)
    return None



def _tracking_uri(value: str) -> str:
    if found := tracking_uri_problem(value):
        raise FixableValueError(*found)
    return value.rstrip("/")


TrackingUri = Annotated[str, Checked(_tracking_uri, TRACKING_URI_LIMIT)]
WandbName = Annotated[str, Checked(refusing(
    lambda v: None if _WANDB_NAME.fullmatch(v) else f"{v!r} is not a W&B project or entity name",
    "use letters, digits, '.', '_' and '-'"), pattern=_WANDB_NAME)]
VertexTensorBoard = Annotated[str, Checked(refusing(
    lambda v: None if _VERTEX_TENSORBOARD.fullmatch(v)
    else f"{v!r} is not a Vertex AI TensorBoard resource name",
    "write projects/PROJECT/locations/REGION/tensorboards/ID (`gcloud ai tensorboards list`)"),
    "a Vertex AI TensorBoard resource name", pattern=_VERTEX_TENSORBOARD)]

class MlflowTracking(StrictModel):
    """One MLflow run per pipeline run: tags, per-step training metrics, stage walls,
    chip-hours, dollars, evaluation scores and the artifacts' URIs."""

    tracking_uri: TrackingUri
    """The MLflow tracking server (http(s)://host:port), as MLFLOW_TRACKING_URI would name it."""
    experiment: str = "tpu-rl-pipeline"
    """The MLflow experiment the runs go to (created when missing)."""
    token: SecretRef | None = None
    """A bearer token for the server (MLflow's MLFLOW_TRACKING_TOKEN), as a reference."""
    attempts: int = Field(5, ge=1, le=10)
    """How many times a report is tried while the server does not answer, before it is
    given up with a warning (the run itself never fails for it)."""



class WandbTracking(StrictModel):
    """Tunix's metrics logger writes to W&B itself when the wandb library is in the image
    and configured: this section configures it (the training program's environment)."""

    project: WandbName
    """The W&B project the training run is logged to."""
    entity: WandbName | None = None
    """The W&B entity (team or user); the API key's default entity when unset."""
    api_key: SecretRef | None = None
    """The W&B API key, as a reference (never a value); required unless mode is offline."""
    mode: Annotated[str, one_of(WANDB_MODES, "W&B mode", "use online or offline")] = "online"
    """online, or offline (written to the run's directory only; `wandb sync` uploads it)."""



    @model_validator(mode="after")
    @limits({"api_key": "required when mode is online; names where the key is kept, not the key"})
    def _key_when_online(self) -> Self:
        ref = self.api_key
        if ref is not None and any(looks_like_wandb_key(v or "") for v in (
                ref.env, ref.secret_block, ref.gcp_secret)):
            raise FixableValueError("api_key names what looks like the W&B key itself, not where "
                                    "it is kept. It looks like a live key: revoke it at "
                                    "wandb.ai/authorize", "put the new key in an environment "
                                    "variable or a secret and name that, e.g. {env: WANDB_API_KEY}",
                                    field="api_key")
        if self.mode == "online" and self.api_key is None:
            raise FixableValueError("online W&B logging needs an API key",
                                    "write api_key: {env: WANDB_API_KEY} (or a secret_block / "
                                    "gcp_secret), or mode: offline", field="api_key")
        return self


    def environment(self, run_name: str, offline_dir: str | None) -> dict[str, str]:
        """The training program's W&B settings (the key travels as a secret, not here).
        wandb.init reads entity and mode from these (wandb/sdk/wandb_settings.py); the
        project and the run's name are passed by tunix's metrics logger itself
        (tunix/sft/metrics_logger.py:190-197 at c4ec573d: MetricsLoggerOptions.project_name,
        which wins over WANDB_PROJECT). MaxText 0.2.4's train_rl leaves it "tunix"; the
        declared patch maxtext-wandb-project (images/post-training/patches.yaml) has it read
        WANDB_PROJECT, so the profile's project is the run's. The run is also grouped by
        the pipeline's run name, to find it where that patch is disabled.

        W&B's console capture is off (WANDB_CONSOLE, the ``console`` setting of wandb 0.31.0's
        wandb/sdk/wandb_settings.py: "off" disables it; its default "auto" becomes "wrap",
        which copies everything the program prints into the run's output.log and uploads
        it). A program prints what it is given, tokens included, and W&B is outside the
        pipeline's redaction; the program's output is kept, redacted, in the run's own log
        (flows/core/program_log.py)."""
        env = {"WANDB_PROJECT": self.project, "WANDB_MODE": self.mode,
               "WANDB_RUN_GROUP": run_name, "WANDB_TAGS": "tpurl", "WANDB_CONSOLE": "off"}
        if self.entity:
            env["WANDB_ENTITY"] = self.entity
        if offline_dir is not None:
            env["WANDB_DIR"] = offline_dir
        return env


class TensorBoardTracking(StrictModel):
    """The event directory is always linked from the run page and the result; this names a
    Vertex AI TensorBoard the GKE run's events are also uploaded to."""

    vertex_tensorboard: VertexTensorBoard | None = None
    """A Vertex AI TensorBoard (projects/P/locations/L/tensorboards/ID) to upload to (GKE)."""
    experiment: str | None = None
    """The Vertex AI TensorBoard experiment; the profile's name when unset."""



class TrackingSection(StrictModel):
    """Experiment trackers the run reports to; each is optional, none is on by default."""

    mlflow: MlflowTracking | None = None
    """An MLflow tracking server."""
    wandb: WandbTracking | None = None
    """Weights & Biases, written by tunix's own metrics logger."""
    tensorboard: TensorBoardTracking | None = None
    """A Vertex AI TensorBoard experiment for the event files."""
