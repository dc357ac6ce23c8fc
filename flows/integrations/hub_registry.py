"""A Hugging Face Hub repository as the registry (issue 35.2): a promoted export is
uploaded as a revision, a branch named after the run, of a repository created private
unless the profile says otherwise. The token is the profile's reference, resolved here and
registered for redaction (flows/core/secrets.py).

Through huggingface_hub's HfApi (2.4.0 hf_api.py: ``create_repo(repo_id, *, private,
repo_type, exist_ok)``, ``create_branch(repo_id, *, branch, exist_ok)``,
``upload_folder(*, repo_id, folder_path, revision, commit_message)`` → CommitInfo with
``oid``). A gs:// export is copied to a temporary directory first.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flows.config.registry import HubRegistry
from flows.core.secrets import resolve
from flows.core.storage import Storage
from flows.integrations.judged import JudgedModel

_BRANCH = re.compile(r"[^A-Za-z0-9._-]")


def branch_name(run: str) -> str:
    """The run's name as a git branch name (the hub's revisions are git refs). Pure."""
    return _BRANCH.sub("-", run).strip(".-")[:100] or "run"


def upload_revision(config: HubRegistry, model: JudgedModel, storage: Storage,
                    project: str | None = None,
                    api_factory: Callable[..., Any] | None = None) -> str:
    """``repo_id@commit`` of the uploaded revision."""
    if api_factory is None:
        from huggingface_hub import HfApi

        api_factory = HfApi
    api = api_factory(token=resolve(config.token, project=project))
    api.create_repo(config.repo_id, private=config.private, repo_type="model", exist_ok=True)
    branch = branch_name(model.run)
    api.create_branch(config.repo_id, branch=branch, repo_type="model", exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tpurl-hub-") as scratch:
        folder = _local_copy(storage, model.export_uri, Path(scratch))
        commit = api.upload_folder(
            repo_id=config.repo_id, folder_path=str(folder), repo_type="model",
            revision=branch, commit_message=f"{model.run}: {model.decision} ({model.reason})"[:500])
    return f"{config.repo_id}@{commit.oid}"


def _local_copy(storage: Storage, uri: str, scratch: Path) -> Path:
    """The export as a local directory: itself when local, else its files copied."""
    local = storage.local_path(uri)
    if local is not None:
        return local
    prefix = uri.rstrip("/") + "/"
    for file_uri in storage.files_under(uri):
        target = scratch / file_uri.removeprefix(prefix)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(storage.read_bytes(file_uri) or b"")
    return scratch
