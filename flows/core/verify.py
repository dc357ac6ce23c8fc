"""What a finished output must look like, checked through Storage: one place for every stage.

Pure over the :class:`~flows.core.storage.Storage` protocol, so the same checks decide on a
``file://`` rehearsal tree and on a GCS bucket, and each returns the list of problems found
(empty when the output is sound) rather than raising: the stage chooses the diagnosis.
"""

from __future__ import annotations

import json
from typing import Any

from flows.core.storage import Storage, join

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
SAFETENSORS_INDEX = "model.safetensors.index.json"
SINGLE_SAFETENSORS = "model.safetensors"


def orbax_checkpoint_problems(storage: Storage, items: str) -> list[str]:
    """The converter writes an orbax checkpoint at ``<dir>/0/items``: entries plus metadata."""
    entries = storage.children(items)
    if not entries:
        return [f"{items} is empty or absent"]
    if not any(e.startswith("_") or e.endswith("METADATA") for e in entries):
        return [f"{items} has no orbax metadata (found {', '.join(entries[:20])})"]
    return []


def newest_actor_step(storage: Storage, actor_dir: str) -> int | None:
    """The highest ``checkpoints/actor/<step>`` that has model_params (not a fixed step)."""
    steps = sorted((int(n) for n in storage.children(actor_dir) if n.isdigit()), reverse=True)
    return next((s for s in steps if storage.exists(join(actor_dir, str(s), "model_params"))),
                None)


def saved_actor_steps(storage: Storage, actor_dir: str) -> list[int]:
    """Every ``checkpoints/actor/<step>`` that has model_params, lowest first."""
    steps = sorted(int(n) for n in storage.children(actor_dir) if n.isdigit())
    return [s for s in steps if storage.exists(join(actor_dir, str(s), "model_params"))]


# orbax-checkpoint 0.12 (the rehearsal lock's 0.12.2) saves a step into
# ``<final>.orbax-checkpoint-tmp`` and renames it to ``<final>`` once complete
# (orbax/checkpoint/_src/path/atomicity_types.py TMP_DIR_SUFFIX, atomicity.py
# _get_tmp_directory; older releases appended ``-<timestamp>``, hence "contains"). On GCS it
# writes in place and marks completion with commit_success.txt instead: nothing to match.
ORBAX_TMP_SUFFIX = ".orbax-checkpoint-tmp"


def orbax_temporaries(storage: Storage, run_dir: str) -> list[str]:
    """The half-written checkpoint directories under ``run_dir``'s checkpoints: never a
    resume point (orbax deletes them when a manager starts), only disk held."""
    base = join(run_dir, "checkpoints")
    found: set[str] = set()
    for uri in storage.files_under(base):
        parts = uri[len(base):].strip("/").split("/")
        for depth, part in enumerate(parts[:-1]):
            if ORBAX_TMP_SUFFIX in part:
                found.add(join(base, *parts[:depth + 1]))
                break
    return sorted(found)


def remove_orbax_temporaries(storage: Storage, run_dir: str) -> int:
    """Delete them (completed checkpoints stay); the number of files removed."""
    removed = 0
    for directory in orbax_temporaries(storage, run_dir):
        removed += storage.remove_tree(directory)
        storage.prune_empty(directory)
    return removed


def hf_export_shards(storage: Storage, export_dir: str) -> tuple[list[str], list[str]]:
    """(shards, problems) of a Hugging Face model directory as a consumer would load it:
    config, tokenizer, and either a safetensors index whose shards all exist or the single
    ``model.safetensors`` that to_huggingface writes for small models."""
    problems = [f for f in ("config.json", *TOKENIZER_FILES)
                if not storage.exists(join(export_dir, f))]
    index_text = storage.read_text(join(export_dir, SAFETENSORS_INDEX))
    if index_text is not None:
        try:
            index: dict[str, Any] = json.loads(index_text)
            shards = sorted(set(index["weight_map"].values()))
        except (ValueError, KeyError, AttributeError, TypeError) as exc:
            return [], [*problems, f"{SAFETENSORS_INDEX} is not a safetensors index ({exc})"]
        if not shards:
            problems.append(f"{SAFETENSORS_INDEX} maps no weights")
        problems += [s for s in shards if not storage.exists(join(export_dir, s))]
        return shards, problems
    if storage.exists(join(export_dir, SINGLE_SAFETENSORS)):
        return [SINGLE_SAFETENSORS], problems
    return [], [*problems, f"{SAFETENSORS_INDEX} or {SINGLE_SAFETENSORS}"]
