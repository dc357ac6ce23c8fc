"""Kubernetes names and labels derived deterministically from (run, stage).

A rerun of the flow must find the JobSet its predecessor created, so a name is a pure function
of what identifies the work (the stage and its run/key), never of time or randomness.

The limit is 28 characters, as ``gcluster job submit`` enforces: JobSet derives pod host names
``<jobset>-<replicatedJob>-<jobIndex>-<podIndex>`` (plus a service name) that must stay within
the 63-character DNS label limit. Names are DNS-1035 labels (start with a letter), which JobSet
requires because the name becomes part of a headless Service name.

Readable when possible, unique always: ``<stage>-<run>`` is used verbatim if it is already a
valid short label without ``--``; otherwise the name is a truncated slug, ``--``, and a digest of
the exact (stage, run) pair. Verbatim names never contain ``--`` and digest names always do,
so the two forms cannot collide.
"""

from __future__ import annotations

import hashlib
import re

JOBSET_NAME_MAX = 28
DIGEST_LEN = 8
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NOT_SLUG = re.compile(r"[^a-z0-9]+")
_NOT_LABEL = re.compile(r"[^A-Za-z0-9_.-]+")


def is_dns1035_label(name: str, max_len: int = 63) -> bool:
    return len(name) <= max_len and bool(_DNS1035.match(name))


def is_label_value(value: str) -> bool:
    return len(value) <= 63 and bool(_LABEL_VALUE.match(value))


def _slug(text: str) -> str:
    return _NOT_SLUG.sub("-", text.lower()).strip("-")


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:DIGEST_LEN]


def jobset_name(run: str, stage: str) -> str:
    """The JobSet name for one stage of one run: ≤ 28 chars, a DNS-1035 label, deterministic."""
    verbatim = f"{stage}-{run}"
    if is_dns1035_label(verbatim, JOBSET_NAME_MAX) and "--" not in verbatim:
        return verbatim
    head = _slug(verbatim)
    if not head or not head[0].isalpha():
        head = f"t-{head}".rstrip("-")
    head = head[: JOBSET_NAME_MAX - DIGEST_LEN - 2].rstrip("-")
    return f"{head}--{_digest(stage, run)}"


def secret_name(owner: str, source: str) -> str:
    """The Secret holding one secret source (``env:HF_TOKEN``, ``prefect-secret:hf-token``)
    for one owner (``team:NAME``, or ``profile:NAME`` for a profile in no team).

    Keyed by the owner and the source, not the run: every run of one team reading the same
    source shares one Secret, which the backend updates to the current value before
    submitting; another team's runs write and mount another Secret, so a second team's value
    never replaces the first's (a queued or restarted pod reads its Secret when it starts).
    The digest covers the exact pair, so a team and a profile of one name cannot share one;
    at most 63 characters.
    """
    slug = _slug(f"{owner} {source}")[:50].rstrip("-")
    return f"tpurl-{slug}-{_digest(owner, source)[:6]}"


def label_value(text: str) -> str:
    """Any text as a valid label value (≤ 63, alphanumeric ends), digest-suffixed if changed."""
    if is_label_value(text):
        return text
    cleaned = _NOT_LABEL.sub("-", text).strip("-_.")[:50].rstrip("-_.")
    return f"{cleaned}-{_digest(text)}" if cleaned else _digest(text)
