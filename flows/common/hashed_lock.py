"""Reading a hash-checking requirements lock (pip's ``--require-hashes`` format, as
``uv pip compile --generate-hashes`` writes it): each requirement line, then its indented
``--hash=sha256:...`` lines.

One parser for the two locks the pipeline checks files against by sha256 (the rehearsal's
tunix wheel, the post-training image's wandb wheels), so both read a lock the same way: a
hash belongs to the requirement line above it, whatever that line holds (a pin, a marker,
a URL), never to an earlier pin.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)==(?P<version>[^\s;\\]+)")
_HASH = re.compile(r"^\s+--hash=sha256:(?P<digest>[0-9a-f]{64})\s*\\?\s*$")


@dataclass(frozen=True)
class HashedPin:
    """One ``name==version`` requirement and the sha256 digests listed under it."""

    name: str
    version: str
    digests: tuple[str, ...]


def hashed_pins(text: str) -> list[HashedPin]:
    """Pure: the lock's ``name==version`` requirements in order, each with its digests.
    A requirement that is not a plain pin starts a block too (its hashes are not a pin's)
    and is left out of the answer."""
    blocks: list[tuple[re.Match[str] | None, list[str]]] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0].isspace():
            if (match := _HASH.match(line)) and blocks:
                blocks[-1][1].append(match["digest"])
            continue
        blocks.append((_PIN.match(line), []))
    return [HashedPin(pin["name"], pin["version"], tuple(digests))
            for pin, digests in blocks if pin is not None]
