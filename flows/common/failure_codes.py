"""Every failure code as a type: a member owns its stable code, the categories the flow gives
it and the fix a user reads for it.

A raise site names a member (``code=Failure.IMAGE_NOT_FOUND``), never a string, so a code
cannot be misspelt or set without its fix; the member is a ``StrEnum``, so events, results
and the reference carry the same ``image/not-found`` text automations match on, and those
texts are never renamed. The pattern is SkyPilot's ``sky/exceptions.py``, whose
``AWSAzFetchingError.Reason`` members carry their own message. The fix here is the general
advice the troubleshooting page prints; the message a stage prints carries its own ``fix:``
line with the figures of the case. What the user sees, and when, is the docs' prose
(reference/symptoms.py), not the runtime's.

``categories`` are the :class:`FailureCategory` values a stage failure with this code
carries (several where the cause decides, e.g. Kueue deactivating a Workload); empty for a
refusal before any stage runs (a profile or environment refusal, printed as ``FIELD:
problem`` and ``fix: ...``). Imports nothing of ``flows``.
"""

from __future__ import annotations

from enum import StrEnum


class FailureCategory(StrEnum):
    """What the flow does with a failure (the failure model of docs/architecture.md).
    Automations and events match on these strings; they are never renamed."""

    PREEMPTED = "preempted"
    INFRASTRUCTURE = "infrastructure"
    QUEUE_TIMEOUT = "queue-timeout"
    STALLED = "stalled"
    USER_ERROR = "user-error"
    INTERNAL = "internal-error"  # a bug of the pipeline's own: report it, do not retry it
    BUDGET = "budget"  # a spend cap was reached (gke.max_usd_per_run): stopped, not retried
    CANCELLED = "cancelled"  # stopped on purpose from outside (an operator): never retried


_REFUSED: tuple[FailureCategory, ...] = ()
_USER = (FailureCategory.USER_ERROR,)
_INFRA = (FailureCategory.INFRASTRUCTURE,)
_QUEUE = (FailureCategory.QUEUE_TIMEOUT,)
_STALLED = (FailureCategory.STALLED,)
_BUDGET = (FailureCategory.BUDGET,)
_CANCELLED = (FailureCategory.CANCELLED,)


class Failure(StrEnum):
    """A stable failure code. A new one is a member here: its code ``area/name`` (an area
    below), the categories it is raised with and its fix, naming only profile fields and
    `tpurl` commands that exist; then what the user sees goes in reference/symptoms.py."""

    categories: tuple[FailureCategory, ...]
    fix: str

    def __new__(cls, code: str, categories: tuple[FailureCategory, ...], fix: str) -> Failure:
        member = str.__new__(cls, code)
        member._value_ = code
        member.categories = categories
        member.fix = fix
        return member

    # --- before anything runs ----------------------------------------------------------------------
    CONFIG_YAML = ("config/yaml", _REFUSED,
        "Fix the YAML at the position shown; a profile file is a mapping of fields (`extends: NAME`, "
        "`backend: ...`), named by its file.")
    CONFIG_NOT_FOUND = ("config/not-found", _REFUSED,
        "Use a shipped name (`tpurl profiles` lists them) or the path of an existing YAML file (a link "
        "pointing at it, not at itself).")
    CONFIG_EXTENDS = ("config/extends", _REFUSED,
        "Name a shipped profile (`extends: rehearsal`) or a YAML file beside this one, and let the last "
        "base of the chain name none.")
    CONFIG_PROFILE_NAME = ("config/profile-name", _REFUSED,
        "Drop the `name:` line (the name is the file's stem) or write the stem there; a file that is "
        "profile X is named X.yaml. An override of `name` is refused: the name picks the team, the lock "
        "and the promotion pointer.")
    CONFIG_PROFILE_NOT_A_NAME = ("config/profile-not-a-name", _REFUSED,
        "Give a shipped profile's name. A profile of your own is deployed by adding it to "
        "deployments/profiles/ and deploying again; `tpurl run FILE.yaml` runs a file locally.")
    CONFIG_MISSING = ("config/missing", _REFUSED,
        "Set the field in the profile, with `--set FIELD=VALUE`, or as `TPURL_SECTION__FIELD` in the "
        "environment. For `gke.reservation`: set it, or choose another `gke.capacity` (on-demand, spot, "
        "flex-start or queued).")
    CONFIG_INVALID = ("config/invalid", _REFUSED,
        "Do what the `fix:` line says; every problem of the profile is listed at once. The allowed "
        "values of each field are on the profile reference page.")
    CONFIG_RETIRED = ("config/retired", _REFUSED,
        "The field is no longer read: remove it and set the field the message names instead.")
    CONFIG_UNKNOWN_ARG = ("config/unknown-arg", _REFUSED,
        "Rename or remove the key; the accepted names are MaxText's config fields. A `--flag` key must "
        "be a flag of that step's script.")
    CONFIG_UNCONVERTIBLE_MODEL = ("config/unconvertible-model", _REFUSED,
        "Set `model.maxtext_name` to one of the listed names and `model.hf_repo` to that model's Hugging "
        "Face repository (a fine-tune of the same architecture converts under the base model's name).")
    CONFIG_DOES_NOT_FIT = ("config/does-not-fit", _REFUSED,
        "Set what the `fix:` line names: the smallest slice of the generation that holds the model "
        "(`gke.machine_type`, `gke.topology`, with the training mesh and rollout split it needs there), "
        "or the split of this slice nearest the profile's on which both roles fit "
        "(`train.args.trainer_devices_fraction`, `train.args.sampler_devices_fraction`, with the mesh "
        "and rollout split fitted to it); or choose a smaller `model.maxtext_name`. A warning instead "
        "(the activations may not fit) is answered by a lower `train.args.batch_size` or "
        "`train.args.max_target_length`, or by the slice it names on which the estimate is not tight. "
        "docs/how-to/profiles.md states the estimate's formula.")
    CONFIG_ROLLOUT_DOES_NOT_FIT = ("config/rollout-does-not-fit", _REFUSED,
        "Set the values the message derives (`train.args.rollout_tensor_parallelism`, "
        "`rollout_data_parallelism`, `hbm_utilization_vllm`: the smallest tensor parallelism that "
        "divides the heads and holds the weights and a rollout batch's KV cache); where no replica holds "
        "the model on the sampler's devices, the split of the slice or the larger slice the message "
        "names. A warning instead (the batch is decoded in waves) is answered by a lower "
        "`train.args.rollout_micro_batch_size` or the same derived values. flows/config/rollout.py "
        "states the arithmetic.")
    CONFIG_UNKNOWN_ENV = ("config/unknown-env", _REFUSED,
        "Rename the variable to the field it means (`TPURL_GKE__PROJECT` sets `gke.project`), or unset "
        "it.")
    CONFIG_DATA_INCONSISTENT = ("config/data-inconsistent", _REFUSED,
        "Name the dataset once, in `data.dataset_name` (the files' dataset, e.g. "
        "nvidia/OpenMathInstruct-2), and use the chat template the message names.")
    CONFIG_RECIPE_SYNTAX = ("config/recipe-syntax", _REFUSED,
        "Correct the file at the line shown (`python -m py_compile FILE` shows it too).")
    CONFIG_RECIPE_MISSING_MODULE = ("config/recipe-missing-module", _REFUSED,
        "Import only what the image has (MaxText 0.2.4, Tunix, JAX, NumPy, the standard library), or put "
        "the code in the file itself: only the recipe's own files travel with it, never the folder "
        "beside them.")
    CONFIG_RECIPE_IMPORT_ERROR = ("config/recipe-import-error", _REFUSED,
        "Make the file import cleanly, doing no reads of your files or the network at import (do them "
        "inside the functions); the `fix:` line gives the command that reproduces it with the rehearsal "
        "venv's Python.")
    CONFIG_RECIPE_IMPORT_TIMEOUT = ("config/recipe-import-timeout", _REFUSED,
        "Do no work at import time (a loop, a download, loading a model): move it into the functions, or "
        "under `if __name__ == '__main__':`.")
    CONFIG_RECIPE_NO_FUNCTION = ("config/recipe-no-function", _REFUSED,
        "Correct the name in `recipe.rewards.functions` (the message names the closest one the file "
        "defines), or define the function.")
    CONFIG_RECIPE_SIGNATURE = ("config/recipe-signature", _REFUSED,
        "Define a reward function as `def NAME(prompts, completions, tmvp_config=None, **kwargs)` (the "
        "dataset's columns arrive in kwargs) and the processor as `def process_data(dataset_name, "
        "tokenizer, template, config, x)`.")
    CONFIG_RECIPE_TEMPLATE = ("config/recipe-template", _REFUSED,
        "Make the template a JSON object whose SYSTEM_PROMPT uses only {reasoning_start_token}, "
        "{reasoning_end_token}, {solution_start_token} and {solution_end_token}, and whose TEMPLATE uses "
        "{system_prompt} and {question}; a literal brace is written {{ or }}.")
    CONFIG_RECIPE_UNCHECKED = ("config/recipe-unchecked", _REFUSED,
        "For the warning, what REASON names: build the venv (`bash scripts/rehearse.sh`, whose first "
        "stage builds it) and validate again; allow user namespaces (sysctl `user.max_user_namespaces` "
        "above 0; on Ubuntu 23.10 and later `kernel.apparmor_restrict_unprivileged_userns=0`) or "
        "validate on a machine that does; or add `--import-recipe`. For an unclassified problem: report "
        "it with the output.")
    CONFIG_SECRET_LITERAL = ("config/secret-literal", _REFUSED,
        "Remove it, revoke the token on the hub, and reference the new one through `model.hf_token` (an "
        "environment variable, a Prefect Secret block or Secret Manager).")
    CONFIG_SECRET_UNAVAILABLE = ("config/secret-unavailable", _REFUSED,
        "Export the variable, create the Prefect Secret block or the Secret Manager secret the field "
        "names, as the `fix:` line says. On a Kubernetes work pool the flow's pod reads `{env: "
        "HF_TOKEN}` from the Secret its pool maps in the pool's namespace (tpurl-team-TEAM-hf-token "
        "on a team's pool, tpurl-hf-token on tpurl-kubernetes), and `{env: WANDB_API_KEY}` from "
        "tpurl-team-TEAM-wandb-api-key or tpurl-wandb-api-key. For Vertex AI: `gcloud auth "
        "application-default login`.")
    CONFIG_SECRET_TOO_SHORT = ("config/secret-too-short", _REFUSED,
        "Put the real token where the field points (a placeholder or a cut-off export is refused: it "
        "could not be kept out of the logs).")
    CONFIG_SECRET_INVALID = ("config/secret-invalid", _REFUSED,
        "Put the key from wandb.ai/authorize there exactly as shown (a current key starts `wandb_v1_`).")
    CONFIG_INTEGRATION_UNREACHABLE = ("config/integration-unreachable", _REFUSED,
        "Start the MLflow server or correct the address (it must be reachable from where the flow runs), "
        "or remove the section.")
    CONFIG_NOTIFY_BLOCK = ("config/notify-block", _REFUSED,
        "Create the block (`prefect block create slack-webhook`, the URL stored in it) on the API the "
        "deployments use, or correct `notify.block` (TYPE/NAME).")
    # --- capacity and spend ------------------------------------------------------------------------
    CONFIG_SPEND_CAP = ("config/spend-cap", _REFUSED,
        "Raise the cap to the figure the `fix:` line gives, or correct `gke.estimated_hours` (or "
        "`gke.train_timeline`) if the estimate is wrong; `tpurl plan PROFILE` prints the estimate.")
    # --- before anything runs ----------------------------------------------------------------------
    CONFIG_SCHEDULE_FOLLOWS_LENGTH = ("config/schedule-follows-length", _USER,
        "Set `train.args.learning_rate_schedule_steps` to S (the `fix:` line gives it) to continue that "
        "run from step K with its schedule, or to T to train a new run from step 0 with a schedule of "
        "its own (docs/how-to/stop-and-resume.md).")
    CONFIG_SHORTER_THAN_SAVED = ("config/shorter-than-saved", _USER,
        "Set `train.args.num_batches` to a saved step the `fix:` line lists (that step is used as it is, "
        "nothing trains), or to the newest or more to continue training.")
    # --- capacity and spend ------------------------------------------------------------------------
    CONFIG_TEAM_BUDGET = ("config/team-budget", _REFUSED,
        "Raise `teams.TEAM.usd_per_month` in the teams file (deployments/teams.yaml) to at least the "
        "figure the `fix:` line gives, or wait for the next month (UTC), or lower the run's size "
        "(`train.args.num_batches`, `gke.estimated_hours`); `tpurl costs TEAM` shows what the month went "
        "on.")
    # --- before anything runs ----------------------------------------------------------------------
    CONFIG_TEAM_LEDGER = ("config/team-ledger", _BUDGET,
        "Set `ledger_root` in the teams file (deployments/teams.yaml) to a gs:// bucket only the flow's "
        "identity writes, no profile's bucket (file:///PATH for local runs); create that bucket and "
        "grant the flow's identity roles/storage.objectViewer and roles/storage.objectCreator on it. "
        "`tpurl costs TEAM` says whether the ledger reads.")
    CONFIG_TEAMS_FILE = ("config/teams-file", _REFUSED,
        "Correct the line the message names in deployments/teams.yaml (or the file TPURL_TEAMS_FILE "
        "names): each team has `usd_per_month` and `profiles`, and a profile belongs to one team at "
        "most; `ledger_root` is a gs://BUCKET or file:///PATH.")
    # --- capacity and spend ------------------------------------------------------------------------
    CONFIG_FLEX_START_RUN = ("config/flex-start-run", _REFUSED,
        "Raise `gke.max_run_hours` (at most 168) to the figure given, or lower `gke.estimated_hours` or "
        "`eval.batches` if the estimate is wrong.")
    # --- before anything runs ----------------------------------------------------------------------
    CONFIG_ROOT_READ_ONLY = ("config/root-read-only", _REFUSED,
        "Point `local.root` at a writable directory, or remount it read-write.")
    CONFIG_ROOT_NOT_WRITABLE = ("config/root-not-writable", _REFUSED,
        "Fix the directory's owner or mode, or point `local.root` elsewhere.")
    CONFIG_ROOT_TOO_SMALL = ("config/root-too-small", _REFUSED,
        "Free space there (old output keys under the root can go) or point `local.root` at a larger disk.")
    CONFIG_NOT_GKE = ("config/not-gke", _REFUSED,
        "Name a GKE profile; a rehearsal has nothing to tear down.")
    ENVIRONMENT_NO_GKE_LIBRARIES = ("environment/no-gke-libraries", _REFUSED,
        "`bash scripts/setup.sh --gke` installs the project with its gcp extra (`bash scripts/setup.sh` "
        "alone installs it with the dev tools).")
    ENVIRONMENT_NO_DOCKER_DAEMON = ("environment/no-docker-daemon", _REFUSED,
        "Start a daemon (`bash scripts/docker-services.sh start`, then export the DOCKER_HOST it "
        "prints), or set `image.builder` to cloud-build (or auto).")
    ENVIRONMENT_NO_CLOUD_BUILD = ("environment/no-cloud-build", _REFUSED,
        "Run `gcloud auth application-default login`, or give the flow's pod a Workload Identity service "
        "account; or provide a Docker daemon and set `image.builder` to docker.")
    ENVIRONMENT_NO_GCLOUD = ("environment/no-gcloud", _REFUSED,
        "Install the Google Cloud CLI and run `gcloud auth login` (on a Kubernetes pool: the flow image "
        "built with cloud tools); `gcloud components install gke-gcloud-auth-plugin` for the plugin.")
    ENVIRONMENT_NO_GOOGLE_CREDENTIALS = ("environment/no-google-credentials", _REFUSED,
        "Run `gcloud auth application-default login`, or give the flow's pod a Workload Identity service "
        "account.")
    ENVIRONMENT_FLOW_IDENTITY = ("environment/flow-identity", _REFUSED,
        "Run the grant commands the `fix:` line prints, or create the runtime identity with `tpurl "
        "flow-identity PROFILE --identity runtime | sh`.")
    # --- the run as a whole ------------------------------------------------------------------------
    PROFILE_INVALID = ("profile/invalid", _USER,
        "Fix the fields listed (each with its own code above; `tpurl validate PROFILE` shows them), then "
        "run again.")
    PROFILE_ENVIRONMENT = ("profile/environment", _USER,
        "`tpurl check PROFILE` on the machine or in the pool the run used lists what is missing, each "
        "with its fix.")
    # --- capacity and spend ------------------------------------------------------------------------
    RUN_TEAM_BUDGET = ("run/team-budget", _BUDGET,
        "`tpurl costs TEAM` shows what the month went on. Wait for the runs before it to end, or for the "
        "next month (UTC), raise `teams.TEAM.usd_per_month` in deployments/teams.yaml, or lower the work "
        "(`train.args.num_batches`); the next run resumes from the newest checkpoint.")
    # --- the run as a whole ------------------------------------------------------------------------
    RUN_TIMED_OUT = ("run/timed-out", _STALLED,
        "Read the named stage's log for a hang. If the run is just long, set `flow_timeout_s` in the "
        "profile (or `--set flow_timeout_s=SECONDS`), or raise the GKE budgets it is made of "
        "(`gke.queue_budget_s`, `gke.run_budget_s`, `gke.train_run_budget_s`, `gke.preemption_budget`).")
    RECIPE_REWARD = ("recipe/reward", _USER,
        "Fix the function in the file `recipe.rewards.file` names: called as `fn(prompts=..., "
        "completions=..., **columns)`, it returns one finite number per completion and never raises. "
        "Then run again; the changed file trains again.")
    # --- building the image ------------------------------------------------------------------------
    IMAGE_PATCH_MISMATCH = ("image/patch-mismatch", _USER,
        "The upstream file changed: update images/post-training/patches.yaml to the new text, or disable "
        "the patch with `image.disabled_patches.<id>` and a reason.")
    IMAGE_PATCH_NOT_IN_EFFECT = ("image/patch-not-in-effect", _USER,
        "Rebuild: delete the image's tag in the registry and run again. If the check step says `PATCH "
        "MEASURED FAILING`, see image/patch-measured-failing.")
    IMAGE_PATCH_MEASURED_FAILING = ("image/patch-measured-failing", _USER,
        "Set `image.disabled_patches.<id>` with the reason, or build from an `image.base` whose versions "
        "differ.")
    IMAGE_BASE_NOT_FOUND = ("image/base-not-found", _USER,
        "Check `image.base`, and that the Docker daemon can read that registry (`gcloud auth "
        "configure-docker REGION-docker.pkg.dev`).")
    IMAGE_BUILD_FAILED = ("image/build-failed", _USER,
        "Read the build log's tail; fix the base image or the build files. A patch that no longer "
        "applies shows as image/patch-mismatch instead.")
    IMAGE_PUSH_FAILED = ("image/push-failed", _INFRA + _USER,
        "For a refusal: `gcloud auth configure-docker REGION-docker.pkg.dev` where the daemon's client "
        "config lives; with Cloud Build, grant its service account roles/artifactregistry.writer on the "
        "repository. Otherwise retry later.")
    IMAGE_REGISTRY_UNAVAILABLE = ("image/registry-unavailable", _INFRA,
        "Nothing to change: the lookup is retried with backoff, then by the flow. If it persists, check "
        "the registry's status and the network from where the flow runs.")
    IMAGE_REGISTRY_REFUSED = ("image/registry-refused", _USER,
        "Check that the flow's Google account may read the repository (roles/artifactregistry.reader) "
        "and the image reference in the profile (`image.base`, `image.repository`).")
    IMAGE_REPOSITORY_UNAVAILABLE = ("image/repository-unavailable", _USER,
        "Get roles/artifactregistry.admin on the project, or have the repository created with the "
        "command the `fix:` line prints; if another run was creating it, run again.")
    IMAGE_WHEELS_UNAVAILABLE = ("image/wheels-unavailable", _USER,
        "Let the flow reach PyPI, or fill a folder with the files images/post-training/wandb.lock names "
        "and export TPURL_WHEEL_DIR=<that folder>.")
    IMAGE_NO_DOCKER_DAEMON = ("image/no-docker-daemon", _INFRA,
        "Start one (`bash scripts/docker-services.sh start`, then export the DOCKER_HOST it prints), or "
        "build with Cloud Build (`image.builder`: cloud-build).")
    IMAGE_NO_GOOGLE_CREDENTIALS = ("image/no-google-credentials", _USER,
        "Run `gcloud auth application-default login`, or check the pod's Workload Identity binding.")
    IMAGE_CLOUD_BUILD_DENIED = ("image/cloud-build-denied", _USER,
        "Enable cloudbuild.googleapis.com and give the flow's account roles/cloudbuild.builds.editor and "
        "roles/storage.admin on the staging bucket the `fix:` line names; or set `image.builder` to "
        "docker where a daemon exists.")
    IMAGE_CLOUD_BUILD_QUOTA = ("image/cloud-build-quota", _INFRA,
        "Wait for the retries, or raise the Cloud Build quota in the console.")
    IMAGE_CLOUD_BUILD_NOT_FOUND = ("image/cloud-build-not-found", _USER,
        "Check that cloudbuild.googleapis.com is enabled on the project and that `image.repository`'s "
        "region is one Cloud Build runs in.")
    IMAGE_CLOUD_BUILD_TIMEOUT = ("image/cloud-build-timeout", _USER,
        "Read the build log for the slow step (usually the base image's pull), then run again.")
    IMAGE_CLOUD_BUILD_CANCELLED = ("image/cloud-build-cancelled", _USER,
        "Someone cancelled the build; run again when it should build.")
    IMAGE_CLOUD_BUILD_FAILED = ("image/cloud-build-failed", _USER + _INFRA,
        "Read the build log the message links; a failure on Cloud Build's side is retried by the flow.")
    IMAGE_ERROR = ("image/error", _USER,
        "Read the summary and detail; `bash scripts/setup.sh --gke` installs the Cloud Build client. If "
        "it is none of these, run `tpurl support-bundle PROFILE` and send the archive.")
    # --- creating the infrastructure ---------------------------------------------------------------
    INFRA_BUNDLE_UNVERIFIED = ("infra/bundle-unverified", _USER,
        "Take the SHA-256 from the release page (or `sha256sum` of a bundle you trust) and set "
        "`gke.cluster_toolkit_sha256`, or add the line to deployments/cluster-toolkit.sha256.")
    DATA_INVALID = ("data/invalid", _USER,
        "Fix the dataset or the field as the `fix:` line says; nothing has run yet.")
    GKE_IAM_NOT_PROPAGATED = ("gke/iam-not-propagated", _USER,
        "Check that the binding is there (the `fix:` line gives the gcloud command) and that no deny "
        "policy or organization constraint blocks the account; re-grant the role if it is missing, then "
        "run again. `gke.iam_propagation_s` is the wait.")
    # --- a stage on gke ----------------------------------------------------------------------------
    GKE_RBAC_FORBIDDEN = ("gke/rbac-forbidden", _USER,
        "Apply deployments/work-pool/rbac.yaml (`kubectl apply -f deployments/work-pool/rbac.yaml`), "
        "then run again. For a Secret it may not update: add the name `tpurl plan PROFILE` lists under "
        "\"Secrets\" to the Role's rule.")
    GKE_SHIPPED_FILE_CHANGED = ("gke/shipped-file-changed", _USER,
        "Leave the file as you want it and run again: the new run's keys name its bytes, so an edited "
        "reward trains again and an unchanged one is found done.")
    GKE_CONFIGMAP_NOT_OURS = ("gke/configmap-not-ours", _USER,
        "See who created it (`kubectl get configmap NAME -o yaml`: its labels and creationTimestamp). "
        "The tool never deletes what it may not have written: if it is no one's, `kubectl delete "
        "configmap NAME -n NAMESPACE` and run again.")
    GKE_DELETED_BY_OPERATOR = ("gke/deleted-by-operator", _CANCELLED,
        "Nothing recreates what was stopped on purpose: run the flow again to start it anew. Who deleted "
        "it is in the cluster's Cloud Audit Logs (Admin Activity).")
    GKE_HOST_MEMORY = ("gke/host-memory", _USER,
        "The same configuration runs out again: make each host hold less (`train.args`: batch size, "
        "sequence and generation lengths) or spread it over more hosts (`gke.topology`, "
        "`gke.num_slices`).")
    STORAGE_EPHEMERAL_STORAGE = ("storage/ephemeral-storage", _USER,
        "Raise the field the `fix:` line names: `gke.conversion_scratch_memory` (with "
        "`gke.conversion_memory` to cover it) or `gke.hf_download_gib` for the download, "
        "`gke.conversion_ephemeral_storage` for the pod's disk.")
    IMAGE_NEVER_PULL = ("image/never-pull", _USER,
        "Use imagePullPolicy IfNotPresent in the manifests.")
    IMAGE_UNAUTHORIZED = ("image/unauthorized", _USER,
        "Grant the node service account roles/artifactregistry.reader on the repository (or fix the "
        "image path's project); retrying cannot help.")
    IMAGE_NOT_FOUND = ("image/not-found", _USER,
        "Build and push the image (the image stage: run again) or fix its tag; retrying cannot help.")
    KUEUE_UNSCHEDULABLE = ("kueue/unschedulable", _USER,
        "Do what the `fix:` line says for Kueue's reason: create the LocalQueue or set `gke.kueue_queue` "
        "to one that exists, start a stopped queue, or cover the requested resource in the ClusterQueue.")
    KUEUE_DEACTIVATED = ("kueue/deactivated", _INFRA + _USER + _CANCELLED,
        "Follow the `fix:` line: a slice too slow to come up is retried (raise Kueue's waitForPodsReady "
        "timeout if it always is); a maximum execution time must be raised where it is set; a "
        "deactivated Workload needs a new run.")
    GKE_SUBMISSION_BUDGET = ("gke/submission-budget", _STALLED,
        "The slice keeps being preempted or failing: check the node pool (maintenance, spot), then "
        "delete the failed JobSet (the `fix:` line's kubectl command) to start counting again, or raise "
        "`gke.preemption_budget`.")
    # --- capacity and spend ------------------------------------------------------------------------
    GKE_NO_CAPACITY = ("gke/no-capacity", _INFRA,
        "The zone has no free slice of this shape now: retry later, add zones (`gke.zones`) or a "
        "fallback mode (`gke.capacity` as a list), or use a reservation.")
    GKE_NO_FLEX_START_CAPACITY = ("gke/no-flex-start-capacity", _QUEUE,
        "No slice was free within the queue budget: retry later, raise `gke.queue_budget_s`, or use "
        "another zone (`gke.zones`) or a reservation.")
    GKE_NO_QUEUED_CAPACITY = ("gke/no-queued-capacity", _QUEUE + _INFRA,
        "Dynamic Workload Scheduler had no slice: retry later, raise `gke.queue_budget_s`, add a zone "
        "(`gke.zones`) or a fallback mode.")
    GKE_QUEUED_BOOKING_EXPIRED = ("gke/queued-booking-expired", _INFRA,
        "The pods must tolerate the cloud.google.com/gke-queued taint and select the queued pool: "
        "`kubectl describe pod` says why they stayed Pending.")
    GKE_SPEND_CAP = ("gke/spend-cap", _BUDGET,
        "Raise `gke.max_usd_per_run` (or the stage's cap) if the run just needs longer, then run again: "
        "the run resumes from its newest checkpoint. Or lower the work: set `train.args.num_batches` to "
        "the steps you want (at least the newest saved step) and keep the learning-rate schedule the "
        "stopped run had (`train.args.learning_rate_schedule_steps`: its value, or the stopped run's "
        "`num_batches` when the profile left it unset); the run then continues from its newest "
        "checkpoint (docs/how-to/stop-and-resume.md).")
    GKE_TEAM_BUDGET = ("gke/team-budget", _BUDGET,
        "`tpurl costs TEAM` shows what the month went on. Raise `teams.TEAM.usd_per_month` in "
        "deployments/teams.yaml, or wait for the next month (UTC), then run again: the run resumes from "
        "its newest checkpoint. Or lower the work: set `train.args.num_batches` to the steps you want "
        "(at least the newest saved step) and keep the stopped run's learning-rate schedule "
        "(`train.args.learning_rate_schedule_steps`: its value, or the stopped run's `num_batches` when "
        "unset); the run continues from its newest checkpoint.")
    GKE_TRAINING_SUSPECT = ("gke/training-suspect", _USER,
        "Read the finding (the run page marks the step; docs/how-to/held-run.md says what each detector "
        "saw). If the recipe's reward is being gamed, fix the reward and run again. If the finding is "
        "wrong for this run, set the detector's policy to hold or warn (e.g. "
        "`health.kl_runaway.policy: hold`) and run again: the run resumes from its newest checkpoint.")
    # --- evaluation and promotion ------------------------------------------------------------------
    CONFIG_EVAL_MISSING = ("config/eval-missing", _REFUSED,
        "Add `eval: {}` (the dataset's test split) or remove `promotion`.")
    CONFIG_EVAL_OVERLAP = ("config/eval-overlap", _REFUSED,
        "Give a held-out file, or remove `eval.files` to use the dataset's test split.")
    CONFIG_EVAL_FILES = ("config/eval-files", _REFUSED,
        "Upload the parquet files and give their gs://BUCKET/... URI (or hf://datasets/...).")
    EVAL_UNSUPPORTED = ("eval/unsupported", _USER,
        "Remove the `eval` section for that backend.")
    EVAL_OVERLAP = ("eval/overlap", _USER,
        "Declare `eval.files` with rows the run does not train on, or remove `eval.files` to use the "
        "test split; raise `eval.batches` when too few rows were scored.")
    EVAL_NO_WATCH = ("eval/no-watch", _USER,
        "Add `watch: {}` to the profile (it needs `eval`), then watch again; the how-to Watch the "
        "champion lists the section's fields.")
    EVAL_WATCH_SET_FOREIGN = ("eval/watch-set-foreign", _USER,
        "Copy the rows to your own bucket or directory and name them in `watch.files`; a watch reads "
        "no other team's output root.")
    EVAL_NO_CHAMPION = ("eval/no-champion", _USER,
        "Promote a model first: a run of a profile with `eval` promotes one when it passes the "
        "promotion rule (docs/how-to/evaluation.md).")
    EVAL_POINTER_UNREADABLE = ("eval/pointer-unreadable", _USER,
        "Restore it from promoted-history.json beside it (its last entry), or delete it to judge against "
        "the base model.")
    # --- announcements and deployments -------------------------------------------------------------
    CONFIG_UNVOUCHED_VALUE = ("config/unvouched-value", _REFUSED,
        "Announce a full commit hash, or a dataset URI under an allowed prefix (or add the prefix to "
        "`announcements.allowed_uri_prefixes` and deploy again).")
    CONFIG_FIXED_BY_DEPLOYMENT = ("config/fixed-by-deployment", _REFUSED,
        "Leave it out of the run's parameters and job variables: the deployment's owner changes it in "
        "the profile or prefect.yaml and deploys again, or run it yourself with `tpurl run PROFILE "
        "--set`. `tpurl profiles --tunable` lists what a run may change.")
    # --- the local rehearsal -----------------------------------------------------------------------
    IMAGE_TUNIX_SOURCE = ("image/tunix-source", _USER,
        "Make GitHub reachable, or export TPURL_WHEEL_DIR=<folder with the tunix wheel the message "
        "names>.")
    IMAGE_VENV_NOT_OURS = ("image/venv-not-ours", _USER,
        "Point `local.venv` (or `local.hf_check_venv`) at a new path, or move the directory away "
        "yourself if it is an old venv you no longer need.")
    IMAGE_VENV_REPATCHED = ("image/venv-repatched", _USER,
        "Give each local profile with its own `image.disabled_patches` a venv of its own (`local.venv`), "
        "or run them one after the other; a rerun's image stage patches the venv back.")
    STORAGE_OUTSIDE_ROOT = ("storage/outside-root", _USER,
        "Remove the symbolic link the message names (or what leads to it) yourself.")
    # --- disk and files where the flow runs --------------------------------------------------------
    STORAGE_EROFS = ("storage/EROFS", _USER,
        "Point `local.root` at a writable directory, or remount it read-write.")
    STORAGE_EACCES = ("storage/EACCES", _USER,
        "Fix that file's or directory's owner or mode, or point `local.root` elsewhere.")
    STORAGE_EPERM = ("storage/EPERM", _USER,
        "Fix that file's or directory's owner or mode, or point `local.root` elsewhere.")
    STORAGE_ENOSPC = ("storage/ENOSPC", _USER,
        "Free space (old output keys under the root can go) or point `local.root` at a larger disk, then "
        "run again.")
    STORAGE_EDQUOT = ("storage/EDQUOT", _USER,
        "Free space or point `local.root` elsewhere.")
