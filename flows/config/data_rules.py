"""What a dataset announcement must come with so MaxText trains on it for real.

MaxText 0.2.4 (maxtext/trainers/post_train/rl/train_rl.py, get_dataset / prepare_datasets)
loads ``hf_train_files`` as parquet whatever ``dataset_name`` says, but ``dataset_name`` still
decides the rest: with its rl.yml default ``openai/gsm8k`` the answers are cut after "####"
(utils_rl.py process_data → extract_hash_answer), so OpenMathInstruct-style answers all score
wrong, and unless ``eval_dataset_name`` equals a splittable ``dataset_name`` the evaluation
set is GSM8K from the hub. Nothing fails: the run just learns nothing from the new data.
So a profile whose data arrive as files names what they hold (``data.dataset_name``), and
these rules refuse the combinations MaxText would silently misread.
"""

from __future__ import annotations

from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.config.limits import limits
from flows.config.profile import Profile

RL_DEFAULT_DATASET = "openai/gsm8k"  # maxtext/configs/post_train/rl.yml
RL_DEFAULT_TEMPLATE = "maxtext/examples/chat_templates/gsm8k_rl.json"  # rl.yml
# train_rl.py prepare_datasets: these names split an eval set off the training files
SPLITTABLE = ("nvidia/OpenMathInstruct-2", "nvidia/OpenMathReasoning",
              "open-r1/OpenR1-Math-220k", "bethgelab/CuratedThoughts")
TEMPLATES = {"openai/gsm8k": "gsm8k_rl.json",
             "nvidia/OpenMathInstruct-2": "openmathinstruct2_rl.json"}


def effective_dataset_name(profile: Profile) -> str:
    named = profile.train.args.get("dataset_name")
    return str(named) if named else (profile.data.dataset_name or RL_DEFAULT_DATASET)


@limits({"data.dataset_name": ["required with data.train_files (unless train.args.dataset_name "
                                "is set); not different from train.args.dataset_name"],
         "train.args": [f"with data.train_files: data_template_path the dataset's template "
                        f"({', '.join(f'{k}: {v}' for k, v in TEMPLATES.items())}); "
                        "eval_dataset_name the dataset's own, or hf_eval_files given"]})
def data_issues(profile: Profile) -> list[Issue]:
    data, args = profile.data, profile.train.args
    issues: list[Issue] = []
    named = str(args["dataset_name"]) if args.get("dataset_name") else None
    if data.dataset_name and named and named != data.dataset_name:
        issues.append(Issue("data.dataset_name", f"is {data.dataset_name!r} but "
                            f"train.args.dataset_name is {named!r}",
                            "name the dataset once: in data.dataset_name (the pipeline passes it "
                            "to MaxText) or in train.args.dataset_name"))
    if data.train_files and not (data.dataset_name or named):
        issues.append(Issue(
            "data.dataset_name", f"is unset while data.train_files is given: MaxText would read "
            f"the files but score them as {RL_DEFAULT_DATASET} (answers after '####'), so an "
            "OpenMathInstruct-style dataset trains on all-wrong rewards",
            "set data.dataset_name to what the files hold, e.g. nvidia/OpenMathInstruct-2",
            Failure.CONFIG_DATA_INCONSISTENT))
    name = effective_dataset_name(profile)
    template = str(args.get("data_template_path") or RL_DEFAULT_TEMPLATE)
    expected = TEMPLATES.get(name)
    if data.train_files and expected and profile.recipe.chat_template is None \
            and not template.endswith(expected):
        issues.append(Issue("train.args.data_template_path", f"is {template!r}, which does not "
                            f"match the dataset {name}", f"use maxtext/examples/chat_templates/"
                            f"{expected}", Failure.CONFIG_DATA_INCONSISTENT))
    eval_name = args.get("eval_dataset_name")
    if data.train_files and eval_name and str(eval_name) != name and \
            not args.get("hf_eval_files"):
        issues.append(Issue("train.args.eval_dataset_name", f"is {eval_name!r}: the evaluation "
                            f"would load that dataset instead of splitting {name} off the files",
                            f"set it to {name}, remove it, or give train.args.hf_eval_files",
                            Failure.CONFIG_DATA_INCONSISTENT))
    return issues


def announced_data_args(profile: Profile) -> list[str]:
    """MaxText arguments that make it read announced files as ``data.dataset_name``."""
    data, args = profile.data, profile.train.args
    if not data.train_files or not data.dataset_name or args.get("dataset_name"):
        return []
    out = [f"dataset_name={data.dataset_name}"]
    if data.dataset_name in SPLITTABLE and not args.get("eval_dataset_name"):
        out.append(f"eval_dataset_name={data.dataset_name}")
    return out
