"""What the user sees for every failure code, and when in a run: the troubleshooting page's
prose, which only the docs read. The fix each code owns is the runtime's
(:class:`flows.common.failure_codes.Failure`); this says where and in what shape the failure
shows, so the page can be organised by symptom and when it happens, not by module.

A profile error is printed as ``FIELD: problem`` and ``fix: ...`` by `tpurl validate`, `tpurl
plan` and `tpurl run` before anything runs; a stage failure as ``[CATEGORY CODE] stage NAME:
summary`` then ``fix: ...`` by `tpurl run`, on the run page and in the `tpurl.stage.failed`
event. A test checks every profile field and `tpurl` command named here exists.
"""

from __future__ import annotations

from enum import StrEnum

from flows.common.failure_codes import Failure


class When(StrEnum):
    """When a failure happens, in the order a run meets them: the troubleshooting page's
    sections."""

    START = "Before anything runs"
    IMAGE = "Building the image"
    INFRA = "Creating the infrastructure"
    STAGE = "A stage on GKE"
    CAPACITY = "Capacity and spend"
    EVALUATION = "Evaluation and promotion"
    ANNOUNCEMENTS = "Announcements and deployments"
    LOCAL = "The local rehearsal"
    FILES = "Disk and files where the flow runs"
    RUN = "The run as a whole"


def anchor(code: Failure) -> str:
    """The code's id on the troubleshooting page (``gke/spend-cap`` → ``gke-spend-cap``)."""
    return code.lower().replace("/", "-")


_PROFILE = ("`tpurl validate`, `tpurl plan` and `tpurl run` refuse the profile before anything "
            "runs, with the line ")
_START = ("`tpurl run` (or a deployment's run) refuses at the flow's start, before any stage "
          "(and `tpurl check PROFILE` beforehand), with the line ")
_ENV = ("`tpurl run` (or a deployment's run, at its start) refuses with \"this environment "
        "cannot run every stage ...; nothing was started\" and the line ")

# code → (when it happens, what is seen: a lead-in above or "", then the message's shape)
SEEN: dict[Failure, tuple[When, str, str]] = {
    Failure.CONFIG_YAML: (When.START, _PROFILE, "`profile: is not valid YAML: ...` (with the line and "
        "column) or `profile: is not a mapping of fields`."),
    Failure.CONFIG_NOT_FOUND: (When.START, _PROFILE, "`profile: no profile named 'X' (did you mean "
        "'Y'?)`, `profile: no file at PATH` or `profile: PATH is a loop of symbolic links`."),
    Failure.CONFIG_EXTENDS: (When.START, _PROFILE, "`extends: makes a loop: a.yaml → b.yaml → a.yaml`, "
        "`extends: must be a profile's name or a YAML file's path`, `extends: '../x' is not a profile "
        "name`, `extends: ... is a loop of symbolic links`, or a chain of more than five profiles."),
    Failure.CONFIG_PROFILE_NAME: (When.START, _PROFILE, "`name: is 'X', and a profile's name is its "
        "file's stem ('Y')`: the file (or an override, or a variable) names another profile than its own."),
    Failure.CONFIG_PROFILE_NOT_A_NAME: (When.START, "", "A run created through the Prefect API (a "
        "deployment's run, a schedule) fails at its start with `run parameter 'profile' is invalid`: it "
        "takes a profile by name only, never a path."),
    Failure.CONFIG_MISSING: (When.START, _PROFILE, "`FIELD: is required but not set` (for a whole "
        "section: `fix: add the SECTION: section to the profile with ...`)."),
    Failure.CONFIG_INVALID: (When.START, _PROFILE, "`FIELD: PROBLEM` and `fix: ...`: a value of the "
        "wrong type or out of range, an unknown field, or a rule across fields (MaxText's and tunix's "
        "start-up checks among them)."),
    Failure.CONFIG_RETIRED: (When.START, _PROFILE, "`FIELD: was removed: ...` or `was replaced by ...`."),
    Failure.CONFIG_UNKNOWN_ARG: (When.START, _PROFILE, "`convert.args.KEY` (or train, export, model) `is "
        "not an argument of PROGRAM in maxtext-0.2.4 (it would stop at start-up)`, often with `did you "
        "mean ...?`."),
    Failure.CONFIG_UNCONVERTIBLE_MODEL: (When.START, _PROFILE, "`model.maxtext_name: 'NAME' is not a "
        "model MaxText 0.2.4 converts both ways`, with the names it does convert."),
    Failure.CONFIG_DOES_NOT_FIT: (When.START, _PROFILE, "`gke.topology: MODEL cannot train on MACHINE "
        "TOPOLOGY: the trainer's weights and optimizer state alone need ...`, with the estimate part by "
        "part (weights, reference, AdamW moments, gradients, activations; the rollout's weights and KV "
        "cache), the total and what the slice holds."),
    Failure.CONFIG_ROLLOUT_DOES_NOT_FIT: (When.START, _PROFILE, "`train.args.rollout_tensor_parallelism: "
        "MODEL's vLLM rollout cannot start: each of the N sampler device(s) (tensor T × data D × expert "
        "E) holds ...`, or `rollout tensor parallelism T does not divide the model's H query and K KV "
        "heads`: vLLM keeps a whole copy of the weights in each data-parallel replica, so a slice the "
        "fit check accepts can still leave a replica too few devices."),
    Failure.CONFIG_UNKNOWN_ENV: (When.START, _PROFILE, "`TPURL_...: sets no profile field, so it would "
        "be ignored` (or names a section, or has an empty part between the `__`)."),
    Failure.CONFIG_DATA_INCONSISTENT: (When.START, _PROFILE, "`data.dataset_name: ...` or "
        "`train.args.data_template_path: ... does not match the dataset` or "
        "`train.args.eval_dataset_name: ...`: the files, the dataset name and the chat template "
        "disagree, so MaxText would score the rows wrongly."),
    Failure.CONFIG_RECIPE_SYNTAX: (When.START, _PROFILE, "`recipe.rewards.file: FILE:LINE: SyntaxError: "
        "...` (or `recipe.dataset_processor`); a deployment's run refuses it at its start the same way."),
    Failure.CONFIG_RECIPE_MISSING_MODULE: (When.START, _PROFILE, "`recipe.rewards.file: FILE:LINE "
        "imports 'NAME', which the environment that runs the recipe does not have`: the file was "
        "imported in the rehearsal venv, which has what the post-training image has."),
    Failure.CONFIG_RECIPE_IMPORT_ERROR: (When.START, _PROFILE, "`recipe.rewards.file: FILE:LINE: "
        "importing it raised TYPE: ...` (or `called exit(...)`, or `ended the process`): the file's top "
        "level fails before MaxText can call anything in it. The check imports it in a sandbox: no "
        "network, an empty home, none of your files but the recipe's."),
    Failure.CONFIG_RECIPE_IMPORT_TIMEOUT: (When.START, _PROFILE, "`recipe.rewards.file: FILE did not "
        "finish importing within N s` (or `recipe.dataset_processor`)."),
    Failure.CONFIG_RECIPE_NO_FUNCTION: (When.START, _PROFILE, "`recipe.rewards.functions: FILE defines "
        "no function 'NAME' (did you mean 'OTHER'?)`, `'NAME' in FILE is a value of type T, not a "
        "function`, or `recipe.dataset_processor: FILE defines no function 'process_data'`."),
    Failure.CONFIG_RECIPE_SIGNATURE: (When.START, _PROFILE, "`recipe.rewards.functions: FILE:LINE: "
        "reward function 'NAME' has no **kwargs` or `cannot take the call MaxText makes, fn(prompts=..., "
        "completions=..., tmvp_config=..., mode=..., question=..., answer=...)`, or "
        "`recipe.dataset_processor: ... process_data cannot take MaxText's call`."),
    Failure.CONFIG_RECIPE_TEMPLATE: (When.START, _PROFILE, "`recipe.chat_template: FILE is not valid "
        "JSON (...)`, `holds a JSON list, not an object`, `has no TEMPLATE`, or `SYSTEM_PROMPT has the "
        "placeholder {NAME}, which MaxText does not fill`. With a `recipe.dataset_processor` of your own "
        "the key and placeholder findings are printed as warnings only (your process_data gets the "
        "template as it is)."),
    Failure.CONFIG_RECIPE_UNCHECKED: (When.START, _PROFILE, "`recipe.rewards.file: ...` naming a problem "
        "the check could not classify. Not a refusal: the line `warning: recipe: the imports of its "
        "Python files were not checked: REASON` means the files were only read (syntax, names, "
        "signatures, template), never run: no rehearsal venv is on this machine, or it cannot make the "
        "sandbox the import runs in (`this machine cannot isolate the team's code`: not Linux, or user "
        "namespaces disabled for the account), or `tpurl plan` or `tpurl check` ran without "
        "`--import-recipe`."),
    Failure.CONFIG_SECRET_LITERAL: (When.START, _PROFILE, "`FIELD: holds what looks like a Hugging Face "
        "token` (the value is never quoted back)."),
    Failure.CONFIG_SECRET_UNAVAILABLE: (When.START, _START, "`model.hf_token: env:HF_TOKEN is not "
        "available where the flow runs` (or a tracker's or registry's token field; or `no Google "
        "credentials where the flow runs` for Vertex AI)."),
    Failure.CONFIG_SECRET_TOO_SHORT: (When.START, _START, "`model.hf_token: ... is not a usable token` "
        "(`holds N character(s), too short to be a real token`)."),
    Failure.CONFIG_SECRET_INVALID: (When.START, _START, "`tracking.wandb.api_key: ... does not hold a "
        "W&B API key wandb accepts`."),
    Failure.CONFIG_INTEGRATION_UNREACHABLE: (When.START, _START, "`tracking.mlflow.tracking_uri: URI "
        "does not answer: ...` (or `promotion.register.mlflow.tracking_uri`)."),
    Failure.CONFIG_NOTIFY_BLOCK: (When.START, "", "`tpurl check PROFILE` prints `FAIL notify.block "
        "[config/notify-block]: no block TYPE/NAME on the Prefect API` (or `... is not a notification "
        "block`); `prefect deploy` refuses the same."),
    Failure.CONFIG_SPEND_CAP: (When.CAPACITY, _PROFILE, "`gke.max_usd_per_run: $X is below the plan's "
        "estimate of $Y ...: every run would be stopped` (or less than `gke.spend_margin` above it, or a "
        "`gke.max_usd_per_stage.STAGE` below its stage's estimate or for a stage the profile does not "
        "run)."),
    Failure.CONFIG_SCHEDULE_FOLLOWS_LENGTH: (When.START, "", "`[user-error "
        "config/schedule-follows-length] stage train: run rl-KEY of this training saved step K with a "
        "learning-rate schedule of S steps; this run's schedule follows its own length (T steps), so it "
        "would train from step 0`: a run that differs from an earlier one in `train.args.num_batches` "
        "only, while the profile leaves `train.args.learning_rate_schedule_steps` unset (MaxText then "
        "spans the schedule over the run's own length). Nothing ran."),
    Failure.CONFIG_SHORTER_THAN_SAVED: (When.START, "", "`[user-error config/shorter-than-saved] stage "
        "train: run rl-KEY has saved steps A, B, ...: train_rl would continue from step N, beyond "
        "num_batches L`: the run asked for fewer steps than its directory already holds, and that length "
        "itself was not saved (train_rl restores the newest checkpoint). Nothing ran."),
    Failure.CONFIG_TEAM_BUDGET: (When.CAPACITY, "", "`tpurl run` (or a deployment's run) refuses at the "
        "flow's start, before any stage, with `teams.TEAM.usd_per_month: a run of PROFILE is estimated "
        "at $E, and team TEAM has $L left of its $B for YYYY-MM (spent $S, ...)`."),
    Failure.CONFIG_TEAM_LEDGER: (When.START, "", "`tpurl run` (or a deployment's run) refuses at the "
        "flow's start, before any stage, with `teams.TEAM.ledger_root: team TEAM has no ledger for its "
        "spend` (or `... shares PROFILE's output root`, or `team TEAM's ledger URI could not be read`); "
        "a TPU stage whose start cannot read it fails `[budget config/team-ledger] stage STAGE not "
        "started`."),
    Failure.CONFIG_TEAMS_FILE: (When.START, "", "`tpurl run` and `tpurl costs` refuse with `the teams "
        "file PATH is invalid` and the line `teams.TEAM.FIELD: problem` (a budget not above 0, an "
        "unknown key, a profile in two teams or no shipped profile)."),
    Failure.CONFIG_FLEX_START_RUN: (When.CAPACITY, _PROFILE, "`gke.max_run_hours: N h is shorter than "
        "the estimated evaluation` (or a run budget longer than the flex-start node lifetime)."),
    Failure.CONFIG_ROOT_READ_ONLY: (When.START, _PROFILE, "`local.root: PATH is on a read-only file "
        "system`."),
    Failure.CONFIG_ROOT_NOT_WRITABLE: (When.START, _PROFILE, "`local.root: PATH is not writable by this "
        "user`."),
    Failure.CONFIG_ROOT_TOO_SMALL: (When.START, _PROFILE, "`local.root: PATH has N GiB free; the stages "
        "that will run need about M GiB`."),
    Failure.CONFIG_NOT_GKE: (When.START, "", "`tpurl teardown` (or the teardown deployment) refuses: "
        "`profile: uses backend local: it has no cluster to tear down`."),
    Failure.ENVIRONMENT_NO_GKE_LIBRARIES: (When.START, "", "`tpurl validate`, `plan` or `run` of a GKE "
        "profile refuses with `backend: a GKE profile needs the cloud libraries, and the Python package "
        "... is not installed`."),
    Failure.ENVIRONMENT_NO_DOCKER_DAEMON: (When.START, _ENV, "`image.builder: stage image: builder "
        "docker, but no Docker daemon answers at HOST`."),
    Failure.ENVIRONMENT_NO_CLOUD_BUILD: (When.START, _ENV, "`image.builder: stage image: ... Cloud Build "
        "cannot be reached: ...`."),
    Failure.ENVIRONMENT_NO_GCLOUD: (When.START, _ENV, "`stage infra: gcloud is not on PATH`; `tpurl "
        "check PROFILE` also reports a missing gke-gcloud-auth-plugin under this code."),
    Failure.ENVIRONMENT_NO_GOOGLE_CREDENTIALS: (When.START, _ENV, "`stage infra: no Google credentials: "
        "...`."),
    Failure.ENVIRONMENT_FLOW_IDENTITY: (When.START, _ENV, "`stage STAGE: the flow runs as ACCOUNT, which "
        "lacks PERMISSION (role ROLE ...)`."),
    Failure.PROFILE_INVALID: (When.RUN, "", "The `tpurl.run.failed` event (and a notification, if "
        "`notify` is set) of a run whose profile was refused at its start: its summary is the profile "
        "error's first line, its fix the fields' fixes."),
    Failure.PROFILE_ENVIRONMENT: (When.RUN, "", "The `tpurl.run.failed` event of a run refused because "
        "where it ran lacked a program, a daemon or credentials for a stage (the `environment/...` "
        "codes)."),
    Failure.RUN_TEAM_BUDGET: (When.CAPACITY, "", "`[budget run/team-budget] stage STAGE not started: "
        "this run counts $X (spent, and estimated for the stages to come) and team TEAM's runs that "
        "started before it this month left $L of its $B for YYYY-MM`: a run ahead of it spent more than "
        "its plan said, or the budget was lowered. The stages it did not start are written to the ledger "
        "at $0."),
    Failure.RUN_TIMED_OUT: (When.RUN, "", "`[stalled]` and a message naming the run's bound "
        "(`flow_timeout_s`, or the sum of its stages' budgets) and the stage that was running; the "
        "`tpurl.run.failed` event carries this code. The run ends TimedOut in Prefect."),
    Failure.RECIPE_REWARD: (When.RUN, "", "`[user-error recipe/reward] stage train: the recipe's reward "
        "function NAME: PROBLEM` (or stage evaluate), where PROBLEM is `raised ERROR: ...`, `returned "
        "TYPE, not a list of one number per completion`, `returned N scores for M completions` or `score "
        "I is nan, not a finite number`; or `the recipe's reward file could not be loaded`. The "
        "program's log holds the line `RECIPE-REWARD-ERROR TOKEN {...}`, TOKEN being the one its first "
        "`RECIPE-REWARD-GUARD TOKEN` line names (a look-alike without it does not count). Not retried."),
    Failure.IMAGE_PATCH_MISMATCH: (When.IMAGE, "", "`[user-error image/patch-mismatch] stage image: a "
        "declared patch does not apply` (Cloud Build's log: `tpurl: PATCH MISMATCH:`), naming the file "
        "and the pattern."),
    Failure.IMAGE_PATCH_NOT_IN_EFFECT: (When.IMAGE, "", "`[user-error image/patch-not-in-effect]`: the "
        "built image applied other patches than declared, or a patch is not in effect in its file (Cloud "
        "Build's check step prints `tpurl: PATCH NOT IN EFFECT:`); nothing was pushed."),
    Failure.IMAGE_PATCH_MEASURED_FAILING: (When.IMAGE, "", "`[user-error image/patch-measured-failing]`: "
        "the image carries the versions with which the rehearsal measured a declared patch failing; "
        "nothing was pushed."),
    Failure.IMAGE_BASE_NOT_FOUND: (When.IMAGE, "", "`[user-error image/base-not-found] stage image: base "
        "image 'REF' is neither in its registry nor local`."),
    Failure.IMAGE_BUILD_FAILED: (When.IMAGE, "", "`[user-error image/build-failed] stage image: ...` "
        "with the build log's tail (Docker), or `Cloud Build step failed: ...` with the build log's "
        "address."),
    Failure.IMAGE_PUSH_FAILED: (When.IMAGE, "", "`image/push-failed`: `push failed after N attempt(s): "
        "...`; `[infrastructure]` when the registry kept answering \"try later\" (retried), "
        "`[user-error]` when it refused."),
    Failure.IMAGE_REGISTRY_UNAVAILABLE: (When.IMAGE, "", "`[infrastructure image/registry-unavailable] "
        "stage image: looking up REF failed after N attempt(s)`."),
    Failure.IMAGE_REGISTRY_REFUSED: (When.IMAGE, "", "`[user-error image/registry-refused]`: the "
        "registry (or its token service) said no for a reason a retry does not change."),
    Failure.IMAGE_REPOSITORY_UNAVAILABLE: (When.IMAGE, "", "`[user-error image/repository-unavailable]`: "
        "`Artifact Registry repository NAME in LOCATION is missing and could not be created`, or it was "
        "still being created when the push gave up."),
    Failure.IMAGE_WHEELS_UNAVAILABLE: (When.IMAGE, "", "`[user-error image/wheels-unavailable]`: the "
        "wheels the image's lock names (W&B and its dependencies) could not be fetched."),
    Failure.IMAGE_NO_DOCKER_DAEMON: (When.IMAGE, "", "`[infrastructure image/no-docker-daemon] stage "
        "image: no Docker daemon reachable at HOST` (retried: it may be restarting)."),
    Failure.IMAGE_NO_GOOGLE_CREDENTIALS: (When.IMAGE, "", "`[user-error image/no-google-credentials] "
        "stage image: no Google credentials for Cloud Build`, or the credentials could not be refreshed."),
    Failure.IMAGE_CLOUD_BUILD_DENIED: (When.IMAGE, "", "`[user-error image/cloud-build-denied] stage "
        "image: Cloud Build API: PermissionDenied: ...`."),
    Failure.IMAGE_CLOUD_BUILD_QUOTA: (When.IMAGE, "", "`[infrastructure image/cloud-build-quota]`: Cloud "
        "Build's quota in the region is used up (concurrent builds or requests); retried."),
    Failure.IMAGE_CLOUD_BUILD_NOT_FOUND: (When.IMAGE, "", "`[user-error image/cloud-build-not-found]`: "
        "Cloud Build in the region does not know the build or the API."),
    Failure.IMAGE_CLOUD_BUILD_TIMEOUT: (When.IMAGE, "", "`[user-error image/cloud-build-timeout] stage "
        "image: Cloud Build finished with status TIMEOUT`."),
    Failure.IMAGE_CLOUD_BUILD_CANCELLED: (When.IMAGE, "", "`[user-error image/cloud-build-cancelled] "
        "stage image: Cloud Build finished with status CANCELLED`."),
    Failure.IMAGE_CLOUD_BUILD_FAILED: (When.IMAGE, "", "`image/cloud-build-failed`: `Cloud Build "
        "finished with status STATUS` (`[infrastructure]` and retried for Cloud Build's own "
        "INTERNAL_ERROR or EXPIRED), or an error of the Cloud Build API itself."),
    Failure.IMAGE_ERROR: (When.IMAGE, "", "`[user-error image/error] stage image: ...`: an image failure "
        "with no finer code (the Cloud Build client not installed, a build that reported no digest, a "
        "patched file that is not a regular file in the image)."),
    Failure.INFRA_BUNDLE_UNVERIFIED: (When.INFRA, "", "`[user-error infra/bundle-unverified] stage "
        "infra: no checksum is known for Cluster Toolkit VERSION; refusing to download it`; `tpurl check "
        "PROFILE` shows it as a FAIL line."),
    Failure.DATA_INVALID: (When.INFRA, "", "`[user-error data/invalid] stage infra: data.train_files: "
        "...` (or `stage evaluate: eval.files: ...`): the dataset does not exist, is not parquet, or "
        "lacks the question and answer columns."),
    Failure.GKE_IAM_NOT_PROPAGATED: (When.INFRA, "", "`[user-error gke/iam-not-propagated]`: `PERMISSION "
        "is still refused to ACCOUNT N s after ... granted it ROLE on RESOURCE` (before that the log "
        "says it waits for IAM propagation and resubmits)."),
    Failure.GKE_RBAC_FORBIDDEN: (When.STAGE, "", "`[user-error gke/rbac-forbidden] stage STAGE: the "
        "flow's Kubernetes identity may not WHAT: it lacks PERMISSION`."),
    Failure.GKE_SHIPPED_FILE_CHANGED: (When.STAGE, "", "`[user-error gke/shipped-file-changed] stage "
        "STAGE: a file WORKLOAD ships is not the one the run planned`, with the file's path: a recipe "
        "file (recipe.rewards.file, recipe.dataset_processor, recipe.chat_template) was edited, moved or "
        "removed between the plan and the submission. Nothing was submitted."),
    Failure.GKE_CONFIGMAP_NOT_OURS: (When.STAGE, "", "`[user-error gke/configmap-not-ours] stage STAGE: "
        "the namespace holds a ConfigMap NAME that is not the programs this run ships`: a ConfigMap of "
        "the name the run computes from its programs' bytes exists with other content, or is not "
        "immutable (it could be edited after the check). The run would mount it; nothing was submitted."),
    Failure.GKE_DELETED_BY_OPERATOR: (When.STAGE, "", "`[cancelled gke/deleted-by-operator] stage STAGE: "
        "JOBSET was deleted from outside the flow at TIME UTC; the stage is cancelled, not retried`."),
    Failure.GKE_HOST_MEMORY: (When.STAGE, "", "`[user-error gke/host-memory]`: `pod POD was evicted from "
        "node NODE: the host ran out of memory` or `CONTAINER of pod POD was OOMKilled`."),
    Failure.STORAGE_EPHEMERAL_STORAGE: (When.STAGE, "", "`[user-error storage/ephemeral-storage] stage "
        "STAGE: JOBSET: pod POD was evicted for disk: ...`: its volume or container outgrew its limit, "
        "or the node ran out of disk."),
    Failure.IMAGE_NEVER_PULL: (When.STAGE, "", "`[user-error image/never-pull]`: `CONTAINER has "
        "imagePullPolicy Never and the image is not on the node`."),
    Failure.IMAGE_UNAUTHORIZED: (When.STAGE, "", "`[user-error image/unauthorized] stage STAGE: JOBSET: "
        "CONTAINER may not pull its image`."),
    Failure.IMAGE_NOT_FOUND: (When.STAGE, "", "`[user-error image/not-found] stage STAGE: JOBSET: "
        "CONTAINER's image does not exist`."),
    Failure.KUEUE_UNSCHEDULABLE: (When.STAGE, "", "`[user-error kueue/unschedulable]`: `JOBSET cannot be "
        "admitted through LocalQueue QUEUE: ...` (Kueue's own message); nothing ran, nothing was spent."),
    Failure.KUEUE_DEACTIVATED: (When.STAGE, "", "`kueue/deactivated`: `Kueue deactivated the Workload of "
        "JOBSET (...): ...; Kueue does not re-queue it` (category by cause: retried when its pods were "
        "not ready in time, cancelled when someone set it inactive)."),
    Failure.GKE_SUBMISSION_BUDGET: (When.STAGE, "", "`[stalled gke/submission-budget]`: `JOBSET was "
        "submitted N time(s), the most this stage may (gke.preemption_budget P + 1)`."),
    Failure.GKE_NO_CAPACITY: (When.CAPACITY, "", "`[infrastructure gke/no-capacity]`: `JOBSET: no TPU "
        "capacity for pod POD: ...` (the autoscaler's FailedScaleUp). With a list in `gke.capacity` the "
        "next mode is tried first; the stage fails once every mode was tried (the summary says so), and "
        "is retried."),
    Failure.GKE_NO_FLEX_START_CAPACITY: (When.CAPACITY, "", "`[queue-timeout "
        "gke/no-flex-start-capacity]`: `JOBSET: waited N min for flex-start capacity: ...`; nothing was "
        "spent."),
    Failure.GKE_NO_QUEUED_CAPACITY: (When.CAPACITY, "", "`gke/no-queued-capacity`: `JOBSET waited N min "
        "for queued capacity` (`[queue-timeout]`) or `queued provisioning could not get the slice after "
        "N attempt(s)` (`[infrastructure]`); the next mode of `gke.capacity` is tried, if any."),
    Failure.GKE_QUEUED_BOOKING_EXPIRED: (When.CAPACITY, "", "`[infrastructure "
        "gke/queued-booking-expired]`: `the queued slice was provisioned but its pods did not land on it "
        "in time`."),
    Failure.GKE_SPEND_CAP: (When.CAPACITY, "", "`[budget gke/spend-cap] stage STAGE stopped: $X of TPU "
        "time spent, cap gke.max_usd_per_run $Y` (or `gke.max_usd_per_stage.STAGE`); the JobSet was "
        "deleted, checkpoints are kept, nothing is retried."),
    Failure.GKE_TRAINING_SUSPECT: (When.STAGE, "", "`[user-error gke/training-suspect] stage train "
        "stopped by the training sentinel: DETECTOR at step N (...)` with the spend saved; the JobSet was "
        "deleted, checkpoints are kept, nothing is retried; the run's suspect event carries the figures "
        "and the curve (docs/reference/events.md)."),
    Failure.GKE_TEAM_BUDGET: (When.CAPACITY, "", "`[budget gke/team-budget] stage STAGE stopped: this "
        "run spent $X of TPU time, all that team TEAM's runs ahead of it left of YYYY-MM ($L)`; the "
        "JobSet was deleted, checkpoints are kept, nothing is retried."),
    Failure.CONFIG_EVAL_MISSING: (When.EVALUATION, _PROFILE, "`promotion: is set but there is no eval "
        "section, so nothing is scored to promote on`."),
    Failure.CONFIG_EVAL_OVERLAP: (When.EVALUATION, _PROFILE, "`eval.files: names the training files`."),
    Failure.CONFIG_EVAL_FILES: (When.EVALUATION, _PROFILE, "`eval.files: 'PATH' is not a bucket or hub "
        "URI` (a GKE profile: the evaluation pod cannot read this machine's files)."),
    Failure.EVAL_UNSUPPORTED: (When.EVALUATION, "", "`[user-error eval/unsupported] stage evaluate: the "
        "BACKEND backend cannot run the evaluation program`."),
    Failure.EVAL_NO_WATCH: (When.EVALUATION, "", "`[user-error eval/no-watch] stage watch: the "
        "profile has no watch section` from `tpurl watch` or a watch deployment's run."),
    Failure.EVAL_WATCH_SET_FOREIGN: (When.EVALUATION, "", "`[user-error eval/watch-set-foreign] "
        "stage watch: watch.files: ... is under ..., the output root of profile ... of team ...`: the "
        "watch's set lies in another team's bucket or directory; nothing was read there."),
    Failure.EVAL_NO_CHAMPION: (When.EVALUATION, "", "`[user-error eval/no-champion] stage watch: "
        "nothing is promoted, so there is no champion to watch`."),
    Failure.EVAL_OVERLAP: (When.EVALUATION, "", "`[user-error eval/overlap] stage evaluate: the held-out "
        "set is not held out` (or is empty, or `the MODEL model's evaluation scored N held-out rows`)."),
    Failure.EVAL_POINTER_UNREADABLE: (When.EVALUATION, "", "`[user-error eval/pointer-unreadable] stage "
        "evaluate: the promoted pointer is unreadable`."),
    Failure.CONFIG_UNVOUCHED_VALUE: (When.ANNOUNCEMENTS, "", "A retrain run is refused at its start with "
        "`model.hf_revision: ...` or `data.train_files: ...`: a value neither the profile nor the "
        "deployment gave fails its rule (a revision must be a 40-hex commit; a dataset must be under "
        "`announcements.allowed_uri_prefixes`)."),
    Failure.CONFIG_FIXED_BY_DEPLOYMENT: (When.ANNOUNCEMENTS, "", "A deployment's run is refused at its "
        "start: `FIELD: is fixed by the deployment (a run's overrides may change only run-tunable "
        "fields)`, or a job variable that `differs from the deployment's value`, or a `profile` other "
        "than the deployment's."),
    Failure.IMAGE_TUNIX_SOURCE: (When.LOCAL, "", "`[user-error image/tunix-source] stage image: the "
        "image's tunix cannot be installed`: neither GitHub nor a wheel folder is reachable."),
    Failure.IMAGE_VENV_NOT_OURS: (When.LOCAL, "", "`[user-error image/venv-not-ours] stage image: "
        "local.venv names a directory tpurl did not create`; nothing is deleted or installed into it."),
    Failure.IMAGE_VENV_REPATCHED: (When.LOCAL, "", "`[user-error image/venv-repatched]`: `the rehearsal "
        "venv was re-patched by another run`."),
    Failure.STORAGE_OUTSIDE_ROOT: (When.LOCAL, "", "`[user-error storage/outside-root]`: `a leftover "
        "directory resolves outside the output root`; nothing was removed."),
    Failure.STORAGE_EROFS: (When.FILES, "", "`[user-error storage/EROFS] stage STAGE: cannot write PATH: "
        "Read-only file system (EROFS)`; the traceback is kept under ~/.cache/tpurl/errors/."),
    Failure.STORAGE_EACCES: (When.FILES, "", "`[user-error storage/EACCES] stage STAGE: cannot access "
        "PATH: Permission denied (EACCES)`."),
    Failure.STORAGE_EPERM: (When.FILES, "", "`[user-error storage/EPERM] stage STAGE: cannot access "
        "PATH: Operation not permitted (EPERM)`."),
    Failure.STORAGE_ENOSPC: (When.FILES, "", "`[user-error storage/ENOSPC] stage STAGE: cannot write "
        "PATH (WHAT): No space left on device (ENOSPC); N GiB free, about M GiB needed`; the attempt's "
        "partial files are removed."),
    Failure.STORAGE_EDQUOT: (When.FILES, "", "`[user-error storage/EDQUOT] stage STAGE: cannot write "
        "PATH: Disk quota exceeded (EDQUOT)`."),
}
