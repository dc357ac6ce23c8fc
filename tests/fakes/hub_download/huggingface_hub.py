"""A stand-in for ``huggingface_hub`` with its one function the GKE train preamble calls.

Upstream (huggingface_hub, src/huggingface_hub/_snapshot_download.py ``snapshot_download``):
``snapshot_download(repo_id, *, repo_type=None, revision=None, cache_dir=None,
local_dir=None, ..., allow_patterns=None, ignore_patterns=None, ...)``; with ``revision``
None it resolves the repository's default branch. This one records its arguments where
``TPURL_FAKE_HUB_LOG`` says and writes a tokenizer file into ``local_dir`` (the hub is not
reachable here); put its folder first on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def snapshot_download(repo_id: str, *, revision: str | None = None,
                      local_dir: str | None = None, allow_patterns: Any = None,
                      **rest: Any) -> str:
    Path(os.environ["TPURL_FAKE_HUB_LOG"]).write_text(json.dumps(
        {"repo_id": repo_id, "revision": revision, "local_dir": local_dir,
         "allow_patterns": allow_patterns}))
    assert local_dir is not None
    Path(local_dir).mkdir(parents=True, exist_ok=True)
    (Path(local_dir) / "tokenizer.json").write_text("{}")
    return local_dir
