"""huggingface_hub's HfApi as the registry uses it (huggingface_hub 2.4.0 hf_api.py:
``create_repo(repo_id, *, token, private, repo_type, exist_ok)`` → RepoUrl, raising when the
repository exists unless exist_ok, and then leaving it as it is: its 409 is passed over and
``private`` "is ignored if the repo already exists"; ``repo_info(repo_id, *, repo_type)`` →
ModelInfo whose ``private`` is the repository's visibility; ``update_repo_settings(repo_id,
*, private, visibility)``, the one call that changes an existing repository's visibility;
``create_branch(repo_id, *, branch, revision, repo_type, exist_ok)``, the branch made from
main; ``upload_folder(*, repo_id, folder_path, commit_message, repo_type, revision)`` →
CommitInfo whose ``oid`` is the new commit, every file under the folder read at the call
except DEFAULT_IGNORE_PATTERNS' ``.git`` and ``.cache/huggingface`` (utils/_paths.py): dot
files such as a marker are uploaded like any other). Holds repositories in memory: their
privacy, branches and each branch's files; ``calls`` names every method called, in order."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any


@dataclass
class CommitInfo:
    oid: str
    commit_url: str


@dataclass
class HubRepo:
    private: bool
    branches: dict[str, dict[str, bytes]] = field(default_factory=lambda: {"main": {}})
    commits: list[str] = field(default_factory=list)


@dataclass
class FakeHub:
    repos: dict[str, HubRepo] = field(default_factory=dict)
    tokens: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)

    def api(self, token: str | None = None) -> FakeHfApi:
        self.tokens.append(token or "")
        return FakeHfApi(self)


@dataclass
class ModelInfo:
    id: str
    private: bool


@dataclass
class FakeHfApi:
    hub: FakeHub

    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("_") and name != "hub":
            self.hub.calls.append(name)
        return object.__getattribute__(self, name)

    def repo_info(self, repo_id: str, *, repo_type: str | None = None, **_: Any) -> ModelInfo:
        assert repo_type in (None, "model")
        return ModelInfo(id=repo_id, private=self.hub.repos[repo_id].private)

    def update_repo_settings(self, repo_id: str, *, private: bool | None = None,
                             visibility: str | None = None, **_: Any) -> None:
        if private is not None or visibility is not None:
            self.hub.repos[repo_id].private = bool(private) or visibility == "private"

    def create_repo(self, repo_id: str, *, private: bool | None = None,
                    repo_type: str | None = None, exist_ok: bool = False, **_: Any) -> str:
        assert repo_type in (None, "model")
        if repo_id in self.hub.repos:
            if not exist_ok:
                raise FileExistsError(f"409 Conflict: {repo_id} exists")
        else:
            self.hub.repos[repo_id] = HubRepo(private=bool(private))
        return f"https://huggingface.co/{repo_id}"

    def create_branch(self, repo_id: str, *, branch: str, revision: str | None = None,
                      repo_type: str | None = None, exist_ok: bool = False, **_: Any) -> None:
        repo = self.hub.repos[repo_id]
        if branch in repo.branches:
            if not exist_ok:
                raise FileExistsError(f"409 Conflict: branch {branch} exists")
            return
        repo.branches[branch] = dict(repo.branches[revision or "main"])

    def upload_folder(self, *, repo_id: str, folder_path: str | Path,
                      commit_message: str | None = None, repo_type: str | None = None,
                      revision: str | None = None, **_: Any) -> CommitInfo:
        repo = self.hub.repos[repo_id]
        files = {str(p.relative_to(folder_path)): p.read_bytes()
                 for p in Path(folder_path).rglob("*") if p.is_file()
                 and not _ignored_by_default(str(p.relative_to(folder_path)))}
        repo.branches[revision or "main"].update(files)
        oid = hashlib.sha1(repr(sorted(files.items())).encode() + (commit_message or "").encode()
                           ).hexdigest()
        repo.commits.append(oid)
        return CommitInfo(oid=oid, commit_url=f"https://huggingface.co/{repo_id}/commit/{oid}")


def _ignored_by_default(relative: str) -> bool:
    """huggingface_hub's DEFAULT_IGNORE_PATTERNS: .git and .cache/huggingface, anywhere."""
    parts = relative.split("/")
    return ".git" in parts or any(a == ".cache" and b == "huggingface"
                                  for a, b in pairwise(parts))
