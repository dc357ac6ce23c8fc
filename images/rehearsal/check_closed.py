"""Exit 1, listing them, if a distribution in this venv requires one that is not installed.

The rehearsal lock is installed without resolving (`--no-deps`, because it names
tensorflow-cpu where its dependents require tensorflow), so nothing at install time would
notice a lock that lost a dependency; this does, reading the metadata pip would read.
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# the same modules under another distribution name (images/rehearsal/requirements.lock)
PROVIDES = {"tensorflow-cpu": "tensorflow"}


def missing() -> list[str]:
    installed = {canonicalize_name(d.metadata["Name"]) for d in metadata.distributions()}
    installed |= {PROVIDES[name] for name in installed if name in PROVIDES}
    found = []
    for dist in metadata.distributions():
        for line in dist.requires or []:
            required = Requirement(line)
            if required.marker is not None and not required.marker.evaluate({"extra": ""}):
                continue
            if canonicalize_name(required.name) not in installed:
                found.append(f"{dist.metadata['Name']} requires {line}")
    return sorted(set(found))


if __name__ == "__main__":
    problems = missing()
    print("\n".join(problems) or "every requirement is installed")
    sys.exit(1 if problems else 0)
