"""Validators for Google Cloud and Kubernetes names: pure functions returning a problem or None.

Each returns the *reason* a name is invalid so the profile error can say exactly what to
change; the rules are the documented ones of GKE, GCS and Resource Manager.
"""

from __future__ import annotations

import ipaddress
import re

from flows.common.token_shapes import HF_TOKEN, TOKEN_SHAPES

CLUSTER_NAME_MAX = 20  # CLUSTER-gke-wl-sa must fit the 30-character service-account id limit
_CLUSTER = re.compile(r"^[a-z]([a-z0-9-]*[a-z0-9])?$")
_PROJECT = re.compile(r"^([a-z][a-z0-9.-]*:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
_ZONE = re.compile(r"^([a-z]+-[a-z]+[0-9]+)-[a-z]$")
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_BUCKET_CHARS = re.compile(r"^[a-z0-9][a-z0-9._-]*[a-z0-9]$")
_ENV_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BLOCK_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_VERSION = re.compile(r"^v[0-9]+\.[0-9]+\.[0-9]+$")
# The rules above in words: the refusals say them, and the types that check them carry them
# into the JSON schema the profile page reads (flows/config/types.py).
CLUSTER_NAME_LIMIT = (f"at most {CLUSTER_NAME_MAX} characters: lowercase letters, digits and "
                      "hyphens, starting with a letter and ending with a letter or digit")
BUCKET_NAME_LIMIT = ("a bare bucket name (no gs://) of 3 to 63 lowercase letters, digits, '-', "
                     "'_' and '.', starting and ending with a letter or digit; not an IP "
                     "address, not starting with 'goog' nor holding 'google'")
PROJECT_ID_LIMIT = "6-30 lowercase letters, digits or hyphens, starting with a letter"
REGION_LIMIT = "a region name like 'us-east5'"
ZONE_LIMIT = "a zone name like 'us-east5-b'"
DNS_LABEL_LIMIT = ("lowercase letters, digits and hyphens, starting with a letter, at most 63 "
                   "characters")
ENV_VAR_LIMIT = "an environment variable name: letters, digits and '_', not starting with a digit"
BLOCK_NAME_LIMIT = "lowercase letters, digits, hyphens"
TOOLKIT_VERSION_LIMIT = "a Cluster Toolkit release tag like 'v1.103.0'"
SECRET_ID_LIMIT = "letters, digits, - and _"


def cluster_name_problem(name: str) -> str | None:
    if len(name) > CLUSTER_NAME_MAX:
        return (f"{name!r} has {len(name)} characters; at most {CLUSTER_NAME_MAX} are allowed "
                "(the blueprint derives service-account ids such as NAME-gke-wl-sa from it)")
    if not _CLUSTER.match(name):
        return (f"{name!r} is not a valid GKE cluster name: use lowercase letters, digits and "
                "hyphens, start with a letter and end with a letter or digit")
    return None


def bucket_name_problem(name: str) -> str | None:
    if name.startswith("gs://"):
        return f"{name!r} is a URI; give the bare bucket name (without gs://)"
    if not 3 <= len(name) <= 63 and "." not in name:
        return f"{name!r} has {len(name)} characters; GCS bucket names have 3 to 63"
    if not _BUCKET_CHARS.match(name):
        return (f"{name!r} is not a valid GCS bucket name: lowercase letters, digits, '-', '_' "
                "and '.', starting and ending with a letter or digit")
    if ".." in name or any(len(part) > 63 for part in name.split(".")):
        return f"{name!r}: dot-separated parts must be non-empty and at most 63 characters"
    try:
        ipaddress.ip_address(name)
        return f"{name!r} looks like an IP address, which GCS forbids as a bucket name"
    except ValueError:
        pass
    if name.startswith("goog") or "google" in name or "g00gle" in name:
        return f"{name!r}: GCS bucket names may not start with 'goog' or contain 'google'"
    return None


def project_id_problem(project: str) -> str | None:
    return None if _PROJECT.match(project) else (
        f"{project!r} is not a Google Cloud project ID: {PROJECT_ID_LIMIT} (the ID, not the "
        "display name or number)")


def region_problem(region: str) -> str | None:
    return None if _REGION.match(region) else f"{region!r} is not {REGION_LIMIT}"


def zone_problem(zone: str, region: str | None) -> str | None:
    match = _ZONE.match(zone)
    if not match:
        return f"{zone!r} is not {ZONE_LIMIT}"
    if region is not None and match.group(1) != region:
        return f"zone {zone!r} is not in region {region!r}"
    return None


def dns_label_problem(value: str, what: str) -> str | None:
    return None if _DNS_LABEL.match(value) else f"{value!r} is not a valid {what}: {DNS_LABEL_LIMIT}"


def env_var_problem(name: str) -> str | None:
    return None if _ENV_VAR.match(name) else f"{name!r} is not an environment variable name"


def block_name_problem(name: str) -> str | None:
    return None if _BLOCK_NAME.match(name) else f"{name!r} is not a Prefect block name ({BLOCK_NAME_LIMIT})"


def toolkit_version_problem(version: str) -> str | None:
    return None if _VERSION.match(version) else f"{version!r} is not {TOOLKIT_VERSION_LIMIT}"


def looks_like_hf_token(value: str) -> bool:
    return bool(HF_TOKEN.fullmatch(value.strip()))


def without_tokens(text: str) -> str:
    """The text with every token-shaped value taken out: a refusal that quoted the value
    would carry it to the terminal, and in a flow run to the state message and the logs."""
    for _marker, shape in TOKEN_SHAPES:
        text = shape.sub(lambda m: (m.group(1) if m.groups() else "") + "***", text)
    return text


_SECRET_ID = re.compile(r"^[A-Za-z0-9_-]{1,255}$")


def secret_id_problem(name: str) -> str | None:
    return None if _SECRET_ID.match(name) else \
        f"{name!r} is not a Secret Manager secret id ({SECRET_ID_LIMIT})"
