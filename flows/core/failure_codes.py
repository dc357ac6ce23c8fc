"""Every failure code, as the person who meets it sees it and what they do about it.

Codes are set where each failure is diagnosed, across the package (flows/reference/
failures_page.py finds them by reading the source); the words a user needs are not there but
here, in one place, so the troubleshooting page (flows/reference/troubleshooting_page.py) can
be organised by symptom and when it happens, not by module. Why a catalogue in code and not a
hand-written page: a test compares it with the codes the source sets (a new code without an
entry, or an entry whose code is set nowhere, fails) and checks that every profile field and
`tpurl` command an entry names exists, so the advice cannot outlive what it advises.

Each entry says what is seen (the message's shape, in the user's words, and where it shows:
a profile error is printed as ``FIELD: problem`` and ``fix: ...`` by `tpurl validate`, `tpurl
plan` and `tpurl run` before anything runs; a stage failure as ``[CATEGORY CODE] stage NAME:
summary`` then ``fix: ...`` by `tpurl run`, on the run page and in the `tpurl.stage.failed`
event) and what to do, naming only fields and commands that exist. Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


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


@dataclass(frozen=True)
class Symptom:
    """One code: ``see`` what the user sees and where, ``do`` what to do about it."""

    code: str
    when: When
    see: str
    do: str

    @property
    def anchor(self) -> str:
        """The entry's id on the troubleshooting page (``gke/spend-cap`` → ``gke-spend-cap``)."""
        return self.code.lower().replace("/", "-")


_PROFILE = "`tpurl validate`, `tpurl plan` and `tpurl run` refuse the profile before anything "\
           "runs, with the line"
_START = ("`tpurl run` (or a deployment's run) refuses at the flow's start, before any stage "
          "(and `tpurl check PROFILE` beforehand), with the line")
_ENV = ("`tpurl run` (or a deployment's run, at its start) refuses with \"this environment "
        "cannot run every stage ...; nothing was started\" and the line")

CATALOGUE: tuple[Symptom, ...] = (
    # --- before anything runs: the profile and what it names ---------------------------
    Symptom("config/yaml", When.START,
            f"{_PROFILE} `profile: is not valid YAML: ...` (with the line and column) or "
            "`profile: is not a mapping of fields`.",
            "Fix the YAML at the position shown; a profile file is a mapping of fields "
            "(`extends: NAME`, `backend: ...`), named by its file."),
    Symptom("config/not-found", When.START,
            f"{_PROFILE} `profile: no profile named 'X' (did you mean 'Y'?)`, `profile: no "
            "file at PATH` or `profile: PATH is a loop of symbolic links`.",
            "Use a shipped name (`tpurl profiles` lists them) or the path of an existing YAML "
            "file (a link pointing at it, not at itself)."),
    Symptom("config/extends", When.START,
            f"{_PROFILE} `extends: makes a loop: a.yaml → b.yaml → a.yaml`, `extends: must be a "
            "profile's name or a YAML file's path`, `extends: '../x' is not a profile name`, "
            "`extends: ... is a loop of symbolic links`, or a chain of more than five profiles.",
            "Name a shipped profile (`extends: rehearsal`) or a YAML file beside this one, and "
            "let the last base of the chain name none."),
    Symptom("config/profile-name", When.START,
            f"{_PROFILE} `name: is 'X', and a profile's name is its file's stem ('Y')`: the "
            "file (or an override, or a variable) names another profile than its own.",
            "Drop the `name:` line (the name is the file's stem) or write the stem there; "
            "a file that is profile X is named X.yaml. An override of `name` is refused: the "
            "name picks the team, the lock and the promotion pointer."),
    Symptom("config/profile-not-a-name", When.START,
            "A run created through the Prefect API (a deployment's run, a schedule) fails at "
            "its start with `run parameter 'profile' is invalid`: it takes a profile by name "
            "only, never a path.",
            "Give a shipped profile's name. A profile of your own is deployed by adding it to "
            "deployments/profiles/ and deploying again; `tpurl run FILE.yaml` runs a file "
            "locally."),
    Symptom("config/missing", When.START,
            f"{_PROFILE} `FIELD: is required but not set` (for a whole section: `fix: add the "
            "SECTION: section to the profile with ...`).",
            "Set the field in the profile, with `--set FIELD=VALUE`, or as `TPURL_SECTION__FIELD`"
            " in the environment. For `gke.reservation`: set it, or choose another "
            "`gke.capacity` (on-demand, spot, flex-start or queued)."),
    Symptom("config/invalid", When.START,
            f"{_PROFILE} `FIELD: PROBLEM` and `fix: ...`: a value of the wrong type or out of "
            "range, an unknown field, or a rule across fields (MaxText's and tunix's start-up "
            "checks among them).",
            "Do what the `fix:` line says; every problem of the profile is listed at once. "
            "The allowed values of each field are on the profile reference page."),
    Symptom("config/retired", When.START,
            f"{_PROFILE} `FIELD: was removed: ...` or `was replaced by ...`.",
            "The field is no longer read: remove it and set the field the message names "
            "instead."),
    Symptom("config/unknown-arg", When.START,
            f"{_PROFILE} `convert.args.KEY` (or train, export, model) `is not an argument of "
            "PROGRAM in maxtext-0.2.4 (it would stop at start-up)`, often with `did you mean "
            "...?`.",
            "Rename or remove the key; the accepted names are MaxText's config fields. A "
            "`--flag` key must be a flag of that step's script."),
    Symptom("config/unconvertible-model", When.START,
            f"{_PROFILE} `model.maxtext_name: 'NAME' is not a model MaxText 0.2.4 converts "
            "both ways`, with the names it does convert.",
            "Set `model.maxtext_name` to one of the listed names and `model.hf_repo` to that "
            "model's Hugging Face repository (a fine-tune of the same architecture converts "
            "under the base model's name)."),
    Symptom("config/does-not-fit", When.START,
            f"{_PROFILE} `gke.topology: MODEL cannot train on MACHINE TOPOLOGY: the "
            "trainer's weights and optimizer state alone need ...`, with the estimate part by "
            "part (weights, reference, AdamW moments, gradients, activations; the rollout's "
            "weights and KV cache), the total and what the slice holds.",
            "Set what the `fix:` line names: the smallest slice of the generation that holds "
            "the model (`gke.machine_type`, `gke.topology`, with the training mesh and rollout "
            "split it needs there), or the split of this slice nearest the profile's on which "
            "both roles fit (`train.args.trainer_devices_fraction`, "
            "`train.args.sampler_devices_fraction`, with the mesh and rollout split fitted to "
            "it); or choose a smaller `model.maxtext_name`. A warning instead (the activations "
            "may not fit) is answered by a lower `train.args.batch_size` or "
            "`train.args.max_target_length`, or by the slice it names on which the estimate "
            "is not tight. docs/how-to/profiles.md states the estimate's formula."),
    Symptom("config/rollout-does-not-fit", When.START,
            f"{_PROFILE} `train.args.rollout_tensor_parallelism: MODEL's vLLM rollout cannot "
            "start: each of the N sampler device(s) (tensor T × data D × expert E) holds ...`, "
            "or `rollout tensor parallelism T does not divide the model's H query and K KV "
            "heads`: vLLM keeps a whole copy of the weights in each data-parallel replica, "
            "so a slice the fit check accepts can still leave a replica too few devices.",
            "Set the values the message derives (`train.args.rollout_tensor_parallelism`, "
            "`rollout_data_parallelism`, `hbm_utilization_vllm`: the smallest tensor "
            "parallelism that divides the heads and holds the weights and a rollout batch's "
            "KV cache); where no replica holds the model on the sampler's devices, the split "
            "of the slice or the larger slice the message names. A warning instead (the batch is "
            "decoded in waves) is answered by a lower `train.args.rollout_micro_batch_size` "
            "or the same derived values. flows/config/rollout.py states the arithmetic."),
    Symptom("config/unknown-env", When.START,
            f"{_PROFILE} `TPURL_...: sets no profile field, so it would be ignored` (or names "
            "a section, or has an empty part between the `__`).",
            "Rename the variable to the field it means (`TPURL_GKE__PROJECT` sets "
            "`gke.project`), or unset it."),
    Symptom("config/data-inconsistent", When.START,
            f"{_PROFILE} `data.dataset_name: ...` or `train.args.data_template_path: ... does "
            "not match the dataset` or `train.args.eval_dataset_name: ...`: the files, the "
            "dataset name and the chat template disagree, so MaxText would score the rows "
            "wrongly.",
            "Name the dataset once, in `data.dataset_name` (the files' dataset, e.g. "
            "nvidia/OpenMathInstruct-2), and use the chat template the message names."),
    Symptom("config/recipe-syntax", When.START,
            f"{_PROFILE} `recipe.rewards.file: FILE:LINE: SyntaxError: ...` (or "
            "`recipe.dataset_processor`); a deployment's run refuses it at its start the same "
            "way.",
            "Correct the file at the line shown (`python -m py_compile FILE` shows it too)."),
    Symptom("config/recipe-missing-module", When.START,
            f"{_PROFILE} `recipe.rewards.file: FILE:LINE imports 'NAME', which the "
            "environment that runs the recipe does not have`: the file was imported in the "
            "rehearsal venv, which has what the post-training image has.",
            "Import only what the image has (MaxText 0.2.4, Tunix, JAX, NumPy, the standard "
            "library), or put the code in the file itself: only the recipe's own files travel "
            "with it, never the folder beside them."),
    Symptom("config/recipe-import-error", When.START,
            f"{_PROFILE} `recipe.rewards.file: FILE:LINE: importing it raised TYPE: ...` (or "
            "`called exit(...)`, or `ended the process`): the file's top level fails before "
            "MaxText can call anything in it. The check imports it in a sandbox: no network, "
            "an empty home, none of your files but the recipe's.",
            "Make the file import cleanly, doing no reads of your files or the network at "
            "import (do them inside the functions); the `fix:` line gives the command that "
            "reproduces it with the rehearsal venv's Python."),
    Symptom("config/recipe-import-timeout", When.START,
            f"{_PROFILE} `recipe.rewards.file: FILE did not finish importing within N s` (or "
            "`recipe.dataset_processor`).",
            "Do no work at import time (a loop, a download, loading a model): move it into "
            "the functions, or under `if __name__ == '__main__':`."),
    Symptom("config/recipe-no-function", When.START,
            f"{_PROFILE} `recipe.rewards.functions: FILE defines no function 'NAME' (did you "
            "mean 'OTHER'?)`, `'NAME' in FILE is a value of type T, not a function`, or "
            "`recipe.dataset_processor: FILE defines no function 'process_data'`.",
            "Correct the name in `recipe.rewards.functions` (the message names the closest "
            "one the file defines), or define the function."),
    Symptom("config/recipe-signature", When.START,
            f"{_PROFILE} `recipe.rewards.functions: FILE:LINE: reward function 'NAME' has no "
            "**kwargs` or `cannot take the call MaxText makes, fn(prompts=..., "
            "completions=..., tmvp_config=..., mode=..., question=..., answer=...)`, or "
            "`recipe.dataset_processor: ... process_data cannot take MaxText's call`.",
            "Define a reward function as `def NAME(prompts, completions, tmvp_config=None, "
            "**kwargs)` (the dataset's columns arrive in kwargs) and the processor as `def "
            "process_data(dataset_name, tokenizer, template, config, x)`."),
    Symptom("config/recipe-template", When.START,
            f"{_PROFILE} `recipe.chat_template: FILE is not valid JSON (...)`, `holds a JSON "
            "list, not an object`, `has no TEMPLATE`, or `SYSTEM_PROMPT has the placeholder "
            "{NAME}, which MaxText does not fill`. With a `recipe.dataset_processor` of your "
            "own the key and placeholder findings are printed as warnings only (your "
            "process_data gets the template as it is).",
            "Make the template a JSON object whose SYSTEM_PROMPT uses only "
            "{reasoning_start_token}, {reasoning_end_token}, {solution_start_token} and "
            "{solution_end_token}, and whose TEMPLATE uses {system_prompt} and {question}; a "
            "literal brace is written {{ or }}."),
    Symptom("config/recipe-unchecked", When.START,
            f"{_PROFILE} `recipe.rewards.file: ...` naming a problem the check could not "
            "classify. Not a refusal: the line `warning: recipe: the imports of its Python "
            "files were not checked: REASON` means the files were only read (syntax, names, "
            "signatures, template), never run: no rehearsal venv is on this machine, or it "
            "cannot make the sandbox the import runs in (`this machine cannot isolate the "
            "team's code`: not Linux, or user namespaces disabled for the account), or "
            "`tpurl plan` or `tpurl check` ran without `--import-recipe`.",
            "For the warning, what REASON names: build the venv (`bash scripts/rehearse.sh`, "
            "whose first stage builds it) and validate again; allow user namespaces (sysctl "
            "`user.max_user_namespaces` above 0; on Ubuntu 23.10 and later "
            "`kernel.apparmor_restrict_unprivileged_userns=0`) or validate on a machine that "
            "does; or add `--import-recipe`. For an unclassified problem: report it with the "
            "output."),
    Symptom("config/secret-literal", When.START,
            f"{_PROFILE} `FIELD: holds what looks like a Hugging Face token` (the value is "
            "never quoted back).",
            "Remove it, revoke the token on the hub, and reference the new one through "
            "`model.hf_token` (an environment variable, a Prefect Secret block or Secret "
            "Manager)."),
    Symptom("config/secret-unavailable", When.START,
            f"{_START} `model.hf_token: env:HF_TOKEN is not available where the flow runs` "
            "(or a tracker's or registry's token field; or `no Google credentials where the "
            "flow runs` for Vertex AI).",
            "Export the variable, create the Prefect Secret block or the Secret Manager "
            "secret the field names, as the `fix:` line says. On a Kubernetes work pool the "
            "flow's pod reads `{env: HF_TOKEN}` from the Secret tpurl-hf-token in the pool's "
            "namespace. For Vertex AI: `gcloud auth application-default login`."),
    Symptom("config/secret-too-short", When.START,
            f"{_START} `model.hf_token: ... is not a usable token` (`holds N character(s), "
            "too short to be a real token`).",
            "Put the real token where the field points (a placeholder or a cut-off export "
            "is refused: it could not be kept out of the logs)."),
    Symptom("config/secret-invalid", When.START,
            f"{_START} `tracking.wandb.api_key: ... does not hold a W&B API key wandb "
            "accepts`.",
            "Put the key from wandb.ai/authorize there exactly as shown (a current key starts "
            "`wandb_v1_`)."),
    Symptom("config/integration-unreachable", When.START,
            f"{_START} `tracking.mlflow.tracking_uri: URI does not answer: ...` (or "
            "`promotion.register.mlflow.tracking_uri`).",
            "Start the MLflow server or correct the address (it must be reachable from where "
            "the flow runs), or remove the section."),
    Symptom("config/notify-block", When.START,
            "`tpurl check PROFILE` prints `FAIL notify.block [config/notify-block]: no block "
            "TYPE/NAME on the Prefect API` (or `... is not a notification block`); "
            "`prefect deploy` refuses the same.",
            "Create the block (`prefect block create slack-webhook`, the URL stored in it) on "
            "the API the deployments use, or correct `notify.block` (TYPE/NAME)."),
    Symptom("config/spend-cap", When.CAPACITY,
            f"{_PROFILE} `gke.max_usd_per_run: $X is below the plan's estimate of $Y ...: "
            "every run would be stopped` (or less than `gke.spend_margin` above it, or a "
            "`gke.max_usd_per_stage.STAGE` below its stage's estimate or for a stage the "
            "profile does not run).",
            "Raise the cap to the figure the `fix:` line gives, or correct "
            "`gke.estimated_hours` (or `gke.train_timeline`) if the estimate is wrong; "
            "`tpurl plan PROFILE` prints the estimate."),
    Symptom("config/schedule-follows-length", When.START,
            "`[user-error config/schedule-follows-length] stage train: run rl-KEY of this "
            "training saved step K with a learning-rate schedule of S steps; this run's "
            "schedule follows its own length (T steps), so it would train from step 0`: a "
            "run that differs from an earlier one in `train.args.num_batches` only, while "
            "the profile leaves `train.args.learning_rate_schedule_steps` unset (MaxText "
            "then spans the schedule over the run's own length). Nothing ran.",
            "Set `train.args.learning_rate_schedule_steps` to S (the `fix:` line gives it) "
            "to continue that run from step K with its schedule, or to T to train a new run "
            "from step 0 with a schedule of its own (docs/how-to/stop-and-resume.md)."),
    Symptom("config/shorter-than-saved", When.START,
            "`[user-error config/shorter-than-saved] stage train: run rl-KEY has saved steps "
            "A, B, ...: train_rl would continue from step N, beyond num_batches L`: the run "
            "asked for fewer steps than its directory already holds, and that length itself "
            "was not saved (train_rl restores the newest checkpoint). Nothing ran.",
            "Set `train.args.num_batches` to a saved step the `fix:` line lists (that step "
            "is used as it is, nothing trains), or to the newest or more to continue "
            "training."),
    Symptom("config/team-budget", When.CAPACITY,
            "`tpurl run` (or a deployment's run) refuses at the flow's start, before any "
            "stage, with `teams.TEAM.usd_per_month: a run of PROFILE is estimated at $E, and "
            "team TEAM has $L left of its $B for YYYY-MM (spent $S, ...)`.",
            "Raise `teams.TEAM.usd_per_month` in the teams file (deployments/teams.yaml) to "
            "at least the figure the `fix:` line gives, or wait for the next month (UTC), or "
            "lower the run's size (`train.args.num_batches`, `gke.estimated_hours`); `tpurl "
            "costs TEAM` shows what the month went on."),
    Symptom("config/team-ledger", When.START,
            "`tpurl run` (or a deployment's run) refuses at the flow's start, before any "
            "stage, with `teams.TEAM.ledger_root: team TEAM has no ledger for its spend` (or "
            "`... shares PROFILE's output root`, or `team TEAM's ledger URI could not be "
            "read`); a TPU stage whose start cannot read it fails `[budget "
            "config/team-ledger] stage STAGE not started`.",
            "Set `ledger_root` in the teams file (deployments/teams.yaml) to a gs:// bucket "
            "only the flow's identity writes, no profile's bucket (file:///PATH for local "
            "runs); create that bucket and grant the flow's identity roles/storage."
            "objectViewer and roles/storage.objectCreator on it. `tpurl costs TEAM` says "
            "whether the ledger reads."),
    Symptom("config/teams-file", When.START,
            "`tpurl run` and `tpurl costs` refuse with `the teams file PATH is invalid` and "
            "the line `teams.TEAM.FIELD: problem` (a budget not above 0, an unknown key, a "
            "profile in two teams or no shipped profile).",
            "Correct the line the message names in deployments/teams.yaml (or the file "
            "TPURL_TEAMS_FILE names): each team has `usd_per_month` and `profiles`, and a "
            "profile belongs to one team at most; `ledger_root` is a gs://BUCKET or "
            "file:///PATH."),
    Symptom("config/flex-start-run", When.CAPACITY,
            f"{_PROFILE} `gke.max_run_hours: N h is shorter than the estimated evaluation` "
            "(or a run budget longer than the flex-start node lifetime).",
            "Raise `gke.max_run_hours` (at most 168) to the figure given, or lower "
            "`gke.estimated_hours` or `eval.batches` if the estimate is wrong."),
    Symptom("config/root-read-only", When.START,
            f"{_PROFILE} `local.root: PATH is on a read-only file system`.",
            "Point `local.root` at a writable directory, or remount it read-write."),
    Symptom("config/root-not-writable", When.START,
            f"{_PROFILE} `local.root: PATH is not writable by this user`.",
            "Fix the directory's owner or mode, or point `local.root` elsewhere."),
    Symptom("config/root-too-small", When.START,
            f"{_PROFILE} `local.root: PATH has N GiB free; the stages that will run need "
            "about M GiB`.",
            "Free space there (old output keys under the root can go) or point `local.root` "
            "at a larger disk."),
    Symptom("config/not-gke", When.START,
            "`tpurl teardown` (or the teardown deployment) refuses: `profile: uses backend "
            "local: it has no cluster to tear down`.",
            "Name a GKE profile; a rehearsal has nothing to tear down."),
    Symptom("environment/no-gke-libraries", When.START,
            "`tpurl validate`, `plan` or `run` of a GKE profile refuses with `backend: a GKE "
            "profile needs the cloud libraries, and the Python package ... is not installed`.",
            "`bash scripts/setup.sh --gke` installs the project with its gcp extra (`bash "
            "scripts/setup.sh` alone installs it with the dev tools)."),
    Symptom("environment/no-docker-daemon", When.START,
            f"{_ENV} `image.builder: stage image: builder docker, but no Docker daemon answers "
            "at HOST`.",
            "Start a daemon (`bash scripts/docker-services.sh start`, then export the "
            "DOCKER_HOST it prints), or set `image.builder` to cloud-build (or auto)."),
    Symptom("environment/no-cloud-build", When.START,
            f"{_ENV} `image.builder: stage image: ... Cloud Build cannot be reached: ...`.",
            "Run `gcloud auth application-default login`, or give the flow's pod a Workload "
            "Identity service account; or provide a Docker daemon and set `image.builder` to "
            "docker."),
    Symptom("environment/no-gcloud", When.START,
            f"{_ENV} `stage infra: gcloud is not on PATH`; `tpurl check PROFILE` also reports "
            "a missing gke-gcloud-auth-plugin under this code.",
            "Install the Google Cloud CLI and run `gcloud auth login` (on a Kubernetes pool: "
            "the flow image built with cloud tools); `gcloud components install "
            "gke-gcloud-auth-plugin` for the plugin."),
    Symptom("environment/no-google-credentials", When.START,
            f"{_ENV} `stage infra: no Google credentials: ...`.",
            "Run `gcloud auth application-default login`, or give the flow's pod a Workload "
            "Identity service account."),
    Symptom("environment/flow-identity", When.START,
            f"{_ENV} `stage STAGE: the flow runs as ACCOUNT, which lacks PERMISSION (role "
            "ROLE ...)`.",
            "Run the grant commands the `fix:` line prints, or create the runtime identity "
            "with `tpurl flow-identity PROFILE --identity runtime | sh`."),
    Symptom("profile/invalid", When.RUN,
            "The `tpurl.run.failed` event (and a notification, if `notify` is set) of a run "
            "whose profile was refused at its start: its summary is the profile error's first "
            "line, its fix the fields' fixes.",
            "Fix the fields listed (each with its own code above; `tpurl validate PROFILE` "
            "shows them), then run again."),
    Symptom("profile/environment", When.RUN,
            "The `tpurl.run.failed` event of a run refused because where it ran lacked a "
            "program, a daemon or credentials for a stage (the `environment/...` codes).",
            "`tpurl check PROFILE` on the machine or in the pool the run used lists what is "
            "missing, each with its fix."),
    Symptom("run/team-budget", When.CAPACITY,
            "`[budget run/team-budget] stage STAGE not started: this run counts $X (spent, "
            "and estimated for the stages to come) and team TEAM's runs that started before "
            "it this month left $L of its $B for YYYY-MM`: a run ahead of it spent more than "
            "its plan said, or the budget was lowered. The stages it did not start are "
            "written to the ledger at $0.",
            "`tpurl costs TEAM` shows what the month went on. Wait for the runs before it to "
            "end, or for the next month (UTC), raise `teams.TEAM.usd_per_month` in "
            "deployments/teams.yaml, or lower the work (`train.args.num_batches`); the next "
            "run resumes from the newest checkpoint."),
    Symptom("run/timed-out", When.RUN,
            "`[stalled]` and a message naming the run's bound (`flow_timeout_s`, or the sum of "
            "its stages' budgets) and the stage that was running; the `tpurl.run.failed` event "
            "carries this code. The run ends TimedOut in Prefect.",
            "Read the named stage's log for a hang. If the run is just long, set "
            "`flow_timeout_s` in the profile (or `--set flow_timeout_s=SECONDS`), or raise "
            "the GKE budgets it is made of (`gke.queue_budget_s`, `gke.run_budget_s`, "
            "`gke.train_run_budget_s`, `gke.preemption_budget`)."),
    Symptom("recipe/reward", When.RUN,
            "`[user-error recipe/reward] stage train: the recipe's reward function NAME: "
            "PROBLEM` (or stage evaluate), where PROBLEM is `raised ERROR: ...`, `returned "
            "TYPE, not a list of one number per completion`, `returned N scores for M "
            "completions` or `score I is nan, not a finite number`; or `the recipe's reward "
            "file could not be loaded`. The program's log holds the line "
            "`RECIPE-REWARD-ERROR {...}`. Not retried.",
            "Fix the function in the file `recipe.rewards.file` names: called as "
            "`fn(prompts=..., completions=..., **columns)`, it returns one finite number per "
            "completion and never raises. Then run again; the changed file trains again."),
    # --- building the image --------------------------------------------------------------
    Symptom("image/patch-mismatch", When.IMAGE,
            "`[user-error image/patch-mismatch] stage image: a declared patch does not apply` "
            "(Cloud Build's log: `tpurl: PATCH MISMATCH:`), naming the file and the pattern.",
            "The upstream file changed: update images/post-training/patches.yaml to the new "
            "text, or disable the patch with `image.disabled_patches.<id>` and a reason."),
    Symptom("image/patch-not-in-effect", When.IMAGE,
            "`[user-error image/patch-not-in-effect]`: the built image applied other patches "
            "than declared, or a patch is not in effect in its file (Cloud Build's check step "
            "prints `tpurl: PATCH NOT IN EFFECT:`); nothing was pushed.",
            "Rebuild: delete the image's tag in the registry and run again. If the check step "
            "says `PATCH MEASURED FAILING`, see image/patch-measured-failing."),
    Symptom("image/patch-measured-failing", When.IMAGE,
            "`[user-error image/patch-measured-failing]`: the image carries the versions with "
            "which the rehearsal measured a declared patch failing; nothing was pushed.",
            "Set `image.disabled_patches.<id>` with the reason, or build from an `image.base` "
            "whose versions differ."),
    Symptom("image/base-not-found", When.IMAGE,
            "`[user-error image/base-not-found] stage image: base image 'REF' is neither in "
            "its registry nor local`.",
            "Check `image.base`, and that the Docker daemon can read that registry (`gcloud "
            "auth configure-docker REGION-docker.pkg.dev`)."),
    Symptom("image/build-failed", When.IMAGE,
            "`[user-error image/build-failed] stage image: ...` with the build log's tail "
            "(Docker), or `Cloud Build step failed: ...` with the build log's address.",
            "Read the build log's tail; fix the base image or the build files. A patch that "
            "no longer applies shows as image/patch-mismatch instead."),
    Symptom("image/push-failed", When.IMAGE,
            "`image/push-failed`: `push failed after N attempt(s): ...`; `[infrastructure]` "
            "when the registry kept answering \"try later\" (retried), `[user-error]` when it "
            "refused.",
            "For a refusal: `gcloud auth configure-docker REGION-docker.pkg.dev` where the "
            "daemon's client config lives; with Cloud Build, grant its service account "
            "roles/artifactregistry.writer on the repository. Otherwise retry later."),
    Symptom("image/registry-unavailable", When.IMAGE,
            "`[infrastructure image/registry-unavailable] stage image: looking up REF failed "
            "after N attempt(s)`.",
            "Nothing to change: the lookup is retried with backoff, then by the flow. If it "
            "persists, check the registry's status and the network from where the flow "
            "runs."),
    Symptom("image/registry-refused", When.IMAGE,
            "`[user-error image/registry-refused]`: the registry (or its token service) said "
            "no for a reason a retry does not change.",
            "Check that the flow's Google account may read the repository "
            "(roles/artifactregistry.reader) and the image reference in the profile "
            "(`image.base`, `image.repository`)."),
    Symptom("image/repository-unavailable", When.IMAGE,
            "`[user-error image/repository-unavailable]`: `Artifact Registry repository NAME "
            "in LOCATION is missing and could not be created`, or it was still being created "
            "when the push gave up.",
            "Get roles/artifactregistry.admin on the project, or have the repository created "
            "with the command the `fix:` line prints; if another run was creating it, run "
            "again."),
    Symptom("image/wheels-unavailable", When.IMAGE,
            "`[user-error image/wheels-unavailable]`: the wheels the image's lock names (W&B "
            "and its dependencies) could not be fetched.",
            "Let the flow reach PyPI, or fill a folder with the files "
            "images/post-training/wandb.lock names and export TPURL_WHEEL_DIR=<that folder>."),
    Symptom("image/no-docker-daemon", When.IMAGE,
            "`[infrastructure image/no-docker-daemon] stage image: no Docker daemon reachable "
            "at HOST` (retried: it may be restarting).",
            "Start one (`bash scripts/docker-services.sh start`, then export the DOCKER_HOST "
            "it prints), or build with Cloud Build (`image.builder`: cloud-build)."),
    Symptom("image/no-google-credentials", When.IMAGE,
            "`[user-error image/no-google-credentials] stage image: no Google credentials for "
            "Cloud Build`, or the credentials could not be refreshed.",
            "Run `gcloud auth application-default login`, or check the pod's Workload Identity "
            "binding."),
    Symptom("image/cloud-build-denied", When.IMAGE,
            "`[user-error image/cloud-build-denied] stage image: Cloud Build API: "
            "PermissionDenied: ...`.",
            "Enable cloudbuild.googleapis.com and give the flow's account "
            "roles/cloudbuild.builds.editor and roles/storage.admin on the staging bucket the "
            "`fix:` line names; or set `image.builder` to docker where a daemon exists."),
    Symptom("image/cloud-build-quota", When.IMAGE,
            "`[infrastructure image/cloud-build-quota]`: Cloud Build's quota in the region is "
            "used up (concurrent builds or requests); retried.",
            "Wait for the retries, or raise the Cloud Build quota in the console."),
    Symptom("image/cloud-build-not-found", When.IMAGE,
            "`[user-error image/cloud-build-not-found]`: Cloud Build in the region does not "
            "know the build or the API.",
            "Check that cloudbuild.googleapis.com is enabled on the project and that "
            "`image.repository`'s region is one Cloud Build runs in."),
    Symptom("image/cloud-build-timeout", When.IMAGE,
            "`[user-error image/cloud-build-timeout] stage image: Cloud Build finished with "
            "status TIMEOUT`.",
            "Read the build log for the slow step (usually the base image's pull), then run "
            "again."),
    Symptom("image/cloud-build-cancelled", When.IMAGE,
            "`[user-error image/cloud-build-cancelled] stage image: Cloud Build finished with "
            "status CANCELLED`.",
            "Someone cancelled the build; run again when it should build."),
    Symptom("image/cloud-build-failed", When.IMAGE,
            "`image/cloud-build-failed`: `Cloud Build finished with status STATUS` "
            "(`[infrastructure]` and retried for Cloud Build's own INTERNAL_ERROR or EXPIRED), "
            "or an error of the Cloud Build API itself.",
            "Read the build log the message links; a failure on Cloud Build's side is retried "
            "by the flow."),
    Symptom("image/error", When.IMAGE,
            "`[user-error image/error] stage image: ...`: an image failure with no finer code "
            "(the Cloud Build client not installed, a build that reported no digest, a patched "
            "file that is not a regular file in the image).",
            "Read the summary and detail; `bash scripts/setup.sh --gke` installs the Cloud "
            "Build client. If it is none of these, run `tpurl support-bundle PROFILE` and "
            "send the archive."),
    # --- creating the infrastructure -----------------------------------------------------
    Symptom("infra/bundle-unverified", When.INFRA,
            "`[user-error infra/bundle-unverified] stage infra: no checksum is known for "
            "Cluster Toolkit VERSION; refusing to download it`; `tpurl check PROFILE` shows "
            "it as a FAIL line.",
            "Take the SHA-256 from the release page (or `sha256sum` of a bundle you trust) and "
            "set `gke.cluster_toolkit_sha256`, or add the line to "
            "deployments/cluster-toolkit.sha256."),
    Symptom("data/invalid", When.INFRA,
            "`[user-error data/invalid] stage infra: data.train_files: ...` (or `stage "
            "evaluate: eval.files: ...`): the dataset does not exist, is not parquet, or lacks "
            "the question and answer columns.",
            "Fix the dataset or the field as the `fix:` line says; nothing has run yet."),
    Symptom("gke/iam-not-propagated", When.INFRA,
            "`[user-error gke/iam-not-propagated]`: `PERMISSION is still refused to ACCOUNT "
            "N s after ... granted it ROLE on RESOURCE` (before that the log says it waits "
            "for IAM propagation and resubmits).",
            "Check that the binding is there (the `fix:` line gives the gcloud command) and "
            "that no deny policy or organization constraint blocks the account; re-grant the "
            "role if it is missing, then run again. `gke.iam_propagation_s` is the wait."),
    # --- a stage on GKE ------------------------------------------------------------------
    Symptom("gke/rbac-forbidden", When.STAGE,
            "`[user-error gke/rbac-forbidden] stage STAGE: the flow's Kubernetes identity may "
            "not WHAT: it lacks PERMISSION`.",
            "Apply deployments/work-pool/rbac.yaml (`kubectl apply -f "
            "deployments/work-pool/rbac.yaml`), then run again. For a Secret it may not "
            "update: add the name `tpurl plan PROFILE` lists under \"Secrets\" to the Role's "
            "rule."),
    Symptom("gke/shipped-file-changed", When.STAGE,
            "`[user-error gke/shipped-file-changed] stage STAGE: a file WORKLOAD ships is not "
            "the one the run planned`, with the file's path: a recipe file (recipe.rewards.file, "
            "recipe.dataset_processor, recipe.chat_template) was edited, moved or removed "
            "between the plan and the submission. Nothing was submitted.",
            "Leave the file as you want it and run again: the new run's keys name its bytes, "
            "so an edited reward trains again and an unchanged one is found done."),
    Symptom("gke/configmap-not-ours", When.STAGE,
            "`[user-error gke/configmap-not-ours] stage STAGE: the namespace holds a ConfigMap "
            "NAME that is not the programs this run ships`: a ConfigMap of the name the run "
            "computes from its programs' bytes exists with other content, or is not immutable "
            "(it could be edited after the check). The run would mount it; nothing was "
            "submitted.",
            "See who created it (`kubectl get configmap NAME -o yaml`: its labels and "
            "creationTimestamp). The tool never deletes what it may not have written: if it "
            "is no one's, `kubectl delete configmap NAME -n NAMESPACE` and run again."),
    Symptom("gke/deleted-by-operator", When.STAGE,
            "`[cancelled gke/deleted-by-operator] stage STAGE: JOBSET was deleted from outside "
            "the flow at TIME UTC; the stage is cancelled, not retried`.",
            "Nothing recreates what was stopped on purpose: run the flow again to start it "
            "anew. Who deleted it is in the cluster's Cloud Audit Logs (Admin Activity)."),
    Symptom("gke/host-memory", When.STAGE,
            "`[user-error gke/host-memory]`: `pod POD was evicted from node NODE: the host ran "
            "out of memory` or `CONTAINER of pod POD was OOMKilled`.",
            "The same configuration runs out again: make each host hold less (`train.args`: "
            "batch size, sequence and generation lengths) or spread it over more hosts "
            "(`gke.topology`, `gke.num_slices`)."),
    Symptom("storage/ephemeral-storage", When.STAGE,
            "`[user-error storage/ephemeral-storage] stage STAGE: JOBSET: pod POD was evicted "
            "for disk: ...`: its volume or container outgrew its limit, or the node ran out "
            "of disk.",
            "Raise the field the `fix:` line names: `gke.conversion_scratch_memory` (with "
            "`gke.conversion_memory` to cover it) or `gke.hf_download_gib` for the download, "
            "`gke.conversion_ephemeral_storage` for the pod's disk."),
    Symptom("image/never-pull", When.STAGE,
            "`[user-error image/never-pull]`: `CONTAINER has imagePullPolicy Never and the "
            "image is not on the node`.",
            "Use imagePullPolicy IfNotPresent in the manifests."),
    Symptom("image/unauthorized", When.STAGE,
            "`[user-error image/unauthorized] stage STAGE: JOBSET: CONTAINER may not pull its "
            "image`.",
            "Grant the node service account roles/artifactregistry.reader on the repository "
            "(or fix the image path's project); retrying cannot help."),
    Symptom("image/not-found", When.STAGE,
            "`[user-error image/not-found] stage STAGE: JOBSET: CONTAINER's image does not "
            "exist`.",
            "Build and push the image (the image stage: run again) or fix its tag; retrying "
            "cannot help."),
    Symptom("kueue/unschedulable", When.STAGE,
            "`[user-error kueue/unschedulable]`: `JOBSET cannot be admitted through LocalQueue "
            "QUEUE: ...` (Kueue's own message); nothing ran, nothing was spent.",
            "Do what the `fix:` line says for Kueue's reason: create the LocalQueue or set "
            "`gke.kueue_queue` to one that exists, start a stopped queue, or cover the "
            "requested resource in the ClusterQueue."),
    Symptom("kueue/deactivated", When.STAGE,
            "`kueue/deactivated`: `Kueue deactivated the Workload of JOBSET (...): ...; Kueue "
            "does not re-queue it` (category by cause: retried when its pods were not ready "
            "in time, cancelled when someone set it inactive).",
            "Follow the `fix:` line: a slice too slow to come up is retried (raise Kueue's "
            "waitForPodsReady timeout if it always is); a maximum execution time must be "
            "raised where it is set; a deactivated Workload needs a new run."),
    Symptom("gke/submission-budget", When.STAGE,
            "`[stalled gke/submission-budget]`: `JOBSET was submitted N time(s), the most this "
            "stage may (gke.preemption_budget P + 1)`.",
            "The slice keeps being preempted or failing: check the node pool (maintenance, "
            "spot), then delete the failed JobSet (the `fix:` line's kubectl command) to "
            "start counting again, or raise `gke.preemption_budget`."),
    # --- capacity and spend --------------------------------------------------------------
    Symptom("gke/no-capacity", When.CAPACITY,
            "`[infrastructure gke/no-capacity]`: `JOBSET: no TPU capacity for pod POD: ...` "
            "(the autoscaler's FailedScaleUp). With a list in `gke.capacity` the next mode is "
            "tried first; the stage fails once every mode was tried (the summary says so), "
            "and is retried.",
            "The zone has no free slice of this shape now: retry later, add zones "
            "(`gke.zones`) or a fallback mode (`gke.capacity` as a list), or use a "
            "reservation."),
    Symptom("gke/no-flex-start-capacity", When.CAPACITY,
            "`[queue-timeout gke/no-flex-start-capacity]`: `JOBSET: waited N min for "
            "flex-start capacity: ...`; nothing was spent.",
            "No slice was free within the queue budget: retry later, raise "
            "`gke.queue_budget_s`, or use another zone (`gke.zones`) or a reservation."),
    Symptom("gke/no-queued-capacity", When.CAPACITY,
            "`gke/no-queued-capacity`: `JOBSET waited N min for queued capacity` "
            "(`[queue-timeout]`) or `queued provisioning could not get the slice after N "
            "attempt(s)` (`[infrastructure]`); the next mode of `gke.capacity` is tried, if "
            "any.",
            "Dynamic Workload Scheduler had no slice: retry later, raise "
            "`gke.queue_budget_s`, add a zone (`gke.zones`) or a fallback mode."),
    Symptom("gke/queued-booking-expired", When.CAPACITY,
            "`[infrastructure gke/queued-booking-expired]`: `the queued slice was provisioned "
            "but its pods did not land on it in time`.",
            "The pods must tolerate the cloud.google.com/gke-queued taint and select the "
            "queued pool: `kubectl describe pod` says why they stayed Pending."),
    Symptom("gke/spend-cap", When.CAPACITY,
            "`[budget gke/spend-cap] stage STAGE stopped: $X of TPU time spent, cap "
            "gke.max_usd_per_run $Y` (or `gke.max_usd_per_stage.STAGE`); the JobSet was "
            "deleted, checkpoints are kept, nothing is retried.",
            "Raise `gke.max_usd_per_run` (or the stage's cap) if the run just needs longer, "
            "then run again: the run resumes from its newest checkpoint. Or lower the work: "
            "set `train.args.num_batches` to the steps you want (at least the newest saved "
            "step) and keep the learning-rate schedule the stopped run had "
            "(`train.args.learning_rate_schedule_steps`: its value, or the stopped run's "
            "`num_batches` when the profile left it unset); the run then continues from its "
            "newest checkpoint (docs/how-to/stop-and-resume.md)."),
    Symptom("gke/team-budget", When.CAPACITY,
            "`[budget gke/team-budget] stage STAGE stopped: this run spent $X of TPU time, "
            "all that team TEAM's runs ahead of it left of YYYY-MM ($L)`; the JobSet was "
            "deleted, checkpoints are kept, nothing is retried.",
            "`tpurl costs TEAM` shows what the month went on. Raise "
            "`teams.TEAM.usd_per_month` in deployments/teams.yaml, or wait for the next month "
            "(UTC), then run again: the run resumes from its newest checkpoint. Or lower the "
            "work: set `train.args.num_batches` to the steps you want (at least the newest "
            "saved step) and keep the stopped run's learning-rate schedule "
            "(`train.args.learning_rate_schedule_steps`: its value, or the stopped run's "
            "`num_batches` when unset); the run continues from its newest checkpoint."),
    # --- evaluation and promotion --------------------------------------------------------
    Symptom("config/eval-missing", When.EVALUATION,
            f"{_PROFILE} `promotion: is set but there is no eval section, so nothing is "
            "scored to promote on`.",
            "Add `eval: {}` (the dataset's test split) or remove `promotion`."),
    Symptom("config/eval-overlap", When.EVALUATION,
            f"{_PROFILE} `eval.files: names the training files`.",
            "Give a held-out file, or remove `eval.files` to use the dataset's test split."),
    Symptom("config/eval-files", When.EVALUATION,
            f"{_PROFILE} `eval.files: 'PATH' is not a bucket or hub URI` (a GKE profile: the "
            "evaluation pod cannot read this machine's files).",
            "Upload the parquet files and give their gs://BUCKET/... URI (or "
            "hf://datasets/...)."),
    Symptom("eval/unsupported", When.EVALUATION,
            "`[user-error eval/unsupported] stage evaluate: the BACKEND backend cannot run the "
            "evaluation program`.",
            "Remove the `eval` section for that backend."),
    Symptom("eval/overlap", When.EVALUATION,
            "`[user-error eval/overlap] stage evaluate: the held-out set is not held out` (or "
            "is empty, or `the MODEL model's evaluation scored N held-out rows`).",
            "Declare `eval.files` with rows the run does not train on, or remove "
            "`eval.files` to use the test split; raise `eval.batches` when too few rows were "
            "scored."),
    Symptom("eval/pointer-unreadable", When.EVALUATION,
            "`[user-error eval/pointer-unreadable] stage evaluate: the promoted pointer is "
            "unreadable`.",
            "Restore it from promoted-history.json beside it (its last entry), or delete it to "
            "judge against the base model."),
    Symptom("eval/no-watch", When.EVALUATION,
            "`[user-error eval/no-watch] stage watch: the profile has no watch "
            "section` from `tpurl watch` or a watch deployment's run.",
            "Add `watch: {}` to the profile (it needs `eval`), then watch again; the how-to "
            "Watch the champion lists the section's fields."),
    Symptom("eval/no-champion", When.EVALUATION,
            "`[user-error eval/no-champion] stage watch: nothing is promoted, so there is no "
            "champion to watch`.",
            "Promote a model first: a run of a profile with `eval` promotes one when it passes "
            "the promotion rule (docs/how-to/evaluation.md)."),
    # --- announcements and deployments ---------------------------------------------------
    Symptom("config/unvouched-value", When.ANNOUNCEMENTS,
            "A retrain run is refused at its start with `model.hf_revision: ...` or "
            "`data.train_files: ...`: a value neither the profile nor the deployment gave "
            "fails its rule (a revision must be a 40-hex commit; a dataset must be under "
            "`announcements.allowed_uri_prefixes`).",
            "Announce a full commit hash, or a dataset URI under an allowed prefix (or add "
            "the prefix to `announcements.allowed_uri_prefixes` and deploy again)."),
    Symptom("config/fixed-by-deployment", When.ANNOUNCEMENTS,
            "A deployment's run is refused at its start: `FIELD: is fixed by the deployment "
            "(a run's overrides may change only run-tunable fields)`, or a job variable that "
            "`differs from the deployment's value`, or a `profile` other than the "
            "deployment's.",
            "Leave it out of the run's parameters and job variables: the deployment's owner "
            "changes it in the profile or prefect.yaml and deploys again, or run it yourself "
            "with `tpurl run PROFILE --set`. `tpurl profiles --tunable` lists what a run may "
            "change."),
    # --- the local rehearsal -------------------------------------------------------------
    Symptom("image/tunix-source", When.LOCAL,
            "`[user-error image/tunix-source] stage image: the image's tunix cannot be "
            "installed`: neither GitHub nor a wheel folder is reachable.",
            "Make GitHub reachable, or export TPURL_WHEEL_DIR=<folder with the tunix wheel "
            "the message names>."),
    Symptom("image/venv-not-ours", When.LOCAL,
            "`[user-error image/venv-not-ours] stage image: local.venv names a directory tpurl "
            "did not create`; nothing is deleted or installed into it.",
            "Point `local.venv` (or `local.hf_check_venv`) at a new path, or move the "
            "directory away yourself if it is an old venv you no longer need."),
    Symptom("image/venv-repatched", When.LOCAL,
            "`[user-error image/venv-repatched]`: `the rehearsal venv was re-patched by "
            "another run`.",
            "Give each local profile with its own `image.disabled_patches` a venv of its own "
            "(`local.venv`), or run them one after the other; a rerun's image stage patches "
            "the venv back."),
    Symptom("storage/outside-root", When.LOCAL,
            "`[user-error storage/outside-root]`: `a leftover directory resolves outside the "
            "output root`; nothing was removed.",
            "Remove the symbolic link the message names (or what leads to it) yourself."),
    # --- disk and files where the flow runs ----------------------------------------------
    Symptom("storage/EROFS", When.FILES,
            "`[user-error storage/EROFS] stage STAGE: cannot write PATH: Read-only file "
            "system (EROFS)`; the traceback is kept under ~/.cache/tpurl/errors/.",
            "Point `local.root` at a writable directory, or remount it read-write."),
    Symptom("storage/EACCES", When.FILES,
            "`[user-error storage/EACCES] stage STAGE: cannot access PATH: Permission denied "
            "(EACCES)`.",
            "Fix that file's or directory's owner or mode, or point `local.root` elsewhere."),
    Symptom("storage/EPERM", When.FILES,
            "`[user-error storage/EPERM] stage STAGE: cannot access PATH: Operation not "
            "permitted (EPERM)`.",
            "Fix that file's or directory's owner or mode, or point `local.root` elsewhere."),
    Symptom("storage/ENOSPC", When.FILES,
            "`[user-error storage/ENOSPC] stage STAGE: cannot write PATH (WHAT): No space left "
            "on device (ENOSPC); N GiB free, about M GiB needed`; the attempt's partial files "
            "are removed.",
            "Free space (old output keys under the root can go) or point `local.root` at a "
            "larger disk, then run again."),
    Symptom("storage/EDQUOT", When.FILES,
            "`[user-error storage/EDQUOT] stage STAGE: cannot write PATH: Disk quota exceeded "
            "(EDQUOT)`.",
            "Free space or point `local.root` elsewhere."),
)


def by_code() -> dict[str, Symptom]:
    """code → its entry."""
    return {entry.code: entry for entry in CATALOGUE}
