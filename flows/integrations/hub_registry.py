"""A Hugging Face Hub repository as the registry: a promoted export is
uploaded as a revision, a branch named after the run, of a repository created private
unless the profile says otherwise. The token is the profile's reference, resolved here and
registered for redaction (flows/core/secrets.py).

What is uploaded is the model and nothing else: the export's config, tokenizer and the
safetensors weights its index names (``model_files``). The export directory also holds the
pipeline's own files (the lineage record, the stage's logs, the ``.tpurl-owned`` marker) and
whatever else a program left there; those say where the run's data lives and what it
printed, and never leave for a hub. Only the chosen files are placed in a scratch folder
(linked where the export is local, else copied) and that folder is uploaded.

An existing repository's visibility is never changed: ``create_repo`` leaves an existing
repository as it is (huggingface_hub 2.4.0 hf_api.py: a 409 with ``exist_ok`` is passed over,
``private`` "is ignored if the repo already exists"), and nothing here calls
``update_repo_settings``. A profile that keeps the model private (``private: true``, the
default) refuses to upload into a repository that is public: the upload would publish it.

Through huggingface_hub's HfApi (2.4.0 hf_api.py: ``create_repo(repo_id, *, private,
repo_type, exist_ok)``, ``repo_info(repo_id, *, repo_type)`` → ModelInfo with ``private``,
``create_branch(repo_id, *, branch, exist_ok)``, ``upload_folder(*, repo_id, folder_path,
revision, commit_message)`` → CommitInfo with ``oid``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from flows.config.registry import HubRegistry
from flows.core.secrets import resolve
from flows.core.storage import Storage, join
from flows.core.verify import SAFETENSORS_INDEX, SINGLE_SAFETENSORS, hf_export_shards
from flows.integrations.judged_model import JudgedModel

# What transformers reads of a model besides its weights (configuration_utils,
# tokenization_utils_base's file names): the config, the generation config, and the
# tokenizer's files in the forms its tokenizer classes save.
MODEL_SIDE_FILES = ("config.json", "generation_config.json", "tokenizer.json",
                    "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                    "vocab.json", "vocab.txt", "merges.txt", "tokenizer.model",
                    "chat_template.jinja", "chat_template.json")


class HubUploadRefused(RuntimeError):
    """The upload would publish what the profile keeps private, or has no model to send."""


_BRANCH = re.compile(r"[^A-Za-z0-9._-]")


def branch_name(run: str) -> str:
    """The run's name as a git branch name (the hub's revisions are git refs). Pure."""
    return _BRANCH.sub("-", run).strip(".-")[:100] or "run"


def model_files(names: Iterable[str], index_text: str | None) -> list[str]:
    """The export's files a hub repository gets: the side files transformers reads, the
    safetensors index with the shards it names, else the single ``model.safetensors``. Top
    level only; anything else (records, logs, markers, a stray shard) stays. Pure."""
    present = set(names)
    chosen = [n for n in MODEL_SIDE_FILES if n in present]
    if index_text is not None and SAFETENSORS_INDEX in present:
        shards = sorted(set(json.loads(index_text)["weight_map"].values()))
        chosen += [SAFETENSORS_INDEX, *(s for s in shards if s in present and "/" not in s)]
    elif SINGLE_SAFETENSORS in present:
        chosen.append(SINGLE_SAFETENSORS)
    return chosen


def upload_revision(config: HubRegistry, model: JudgedModel, storage: Storage,
                    project: str | None = None,
                    api_factory: Callable[..., Any] | None = None) -> str:
    """``repo_id@commit`` of the uploaded revision."""
    if api_factory is None:
        from huggingface_hub import HfApi

        api_factory = HfApi
    files = _export_files(storage, model.export_uri)
    api = api_factory(token=resolve(config.token, project=project))
    api.create_repo(config.repo_id, private=config.private, repo_type="model", exist_ok=True)
    if config.private and not api.repo_info(config.repo_id, repo_type="model").private:
        raise HubUploadRefused(
            f"{config.repo_id} is public and the profile keeps its models private "
            "(promotion.register.hub.private: true): the model was not uploaded. Make the "
            "repository private on the hub, name another repo_id, or set "
            "promotion.register.hub.private: false to publish it")
    branch = branch_name(model.run)
    api.create_branch(config.repo_id, branch=branch, repo_type="model", exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tpurl-hub-") as scratch:
        folder = Path(scratch)
        _place(storage, model.export_uri, files, folder)
        commit = api.upload_folder(
            repo_id=config.repo_id, folder_path=str(folder), repo_type="model",
            revision=branch, commit_message=f"{model.run}: {model.decision} ({model.reason})"[:500])
    return f"{config.repo_id}@{commit.oid}"


def _export_files(storage: Storage, uri: str) -> list[str]:
    """The model's files of the export; refused when it is not a loadable model."""
    prefix = uri.rstrip("/") + "/"
    names = [u.removeprefix(prefix) for u in storage.files_under(uri)]
    _, problems = hf_export_shards(storage, uri)
    if problems:
        raise HubUploadRefused(f"{uri} is not a complete model (missing: {', '.join(problems)})")
    return model_files(names, storage.read_text(join(uri, SAFETENSORS_INDEX)))


def _place(storage: Storage, uri: str, files: list[str], folder: Path) -> None:
    """The chosen files in ``folder``: hard links to a local export (no second copy of the
    weights), copies where linking is refused or the export is remote."""
    local = storage.local_path(uri)
    for name in files:
        target = folder / name
        if local is None:
            target.write_bytes(storage.read_bytes(join(uri, name)) or b"")
            continue
        try:
            os.link(local / name, target)
        except OSError:  # another file system
            shutil.copyfile(local / name, target)
