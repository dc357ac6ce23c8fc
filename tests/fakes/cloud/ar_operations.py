"""Artifact Registry's CreateRepository as a long-running operation (the fake GoogleApis).

googleapis google/devtools/artifactregistry/v1/service.proto: ``rpc CreateRepository(...)
returns (google.longrunning.Operation)`` — "The returned Operation will finish once the
repository has been created. Its response will be the created Repository." Until then a
GetRepository answers 404 and a push to it fails; the operation is polled with
google.longrunning.Operations.GetOperation (artifactregistry_v1.yaml:
``/v1/{name=projects/*/locations/*/operations/*}``), whose answer carries ``done`` and then
``response`` (or ``error``).

``Creations.delay_s`` is how long the creation takes (0: done in the create's answer, as the
fake did before).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Creations:
    delay_s: float = 0.0
    # operation name → (repository key, its resource, monotonic time it is created)
    pending: dict[str, tuple[str, dict[str, Any], float]] = field(default_factory=dict)
    polls: int = 0
    error: dict[str, Any] | None = None  # a google.rpc.Status the next creations end with

    def start(self, repositories: dict[str, dict[str, Any]], key: str,
              repository: dict[str, Any]) -> dict[str, Any]:
        """The create's answer: done at once without a delay, else a pending operation."""
        if self.delay_s <= 0:
            repositories[key] = repository
            return {"name": self._name(repository), "done": True, "response": repository}
        name = self._name(repository)
        self.pending[name] = (key, repository, time.monotonic() + self.delay_s)
        return {"name": name, "done": False}

    def settle(self, repositories: dict[str, dict[str, Any]]) -> None:
        """The creations whose time came: the repository now exists."""
        now = time.monotonic()
        for name, (key, repository, at) in list(self.pending.items()):
            if now >= at:
                if self.error is None:
                    repositories[key] = repository
                del self.pending[name]

    def get(self, repositories: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
        self.polls += 1
        self.settle(repositories)
        if name in self.pending:
            return {"name": name, "done": False}
        if self.error is not None:
            return {"name": name, "done": True, "error": self.error}
        key = next((k for k, r in repositories.items() if self._name(r) == name), None)
        if key is None and self.error is not None:
            return {"name": name, "done": True, "error": self.error}
        if key is None:
            raise LookupError(f"404 operation {name} not found")
        return {"name": name, "done": True, "response": repositories[key]}

    def being_created(self, key: str) -> bool:
        return any(k == key for k, _, _ in self.pending.values())

    @staticmethod
    def _name(repository: dict[str, Any]) -> str:
        parent = repository["name"].split("/repositories/")[0]
        return f"{parent}/operations/{uuid.uuid5(uuid.NAMESPACE_URL, repository['name'])}"
