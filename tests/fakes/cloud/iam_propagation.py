"""IAM as it enforces a grant: only once the change has propagated.

Google documents allow-policy changes as eventually consistent: they "typically propagate
in 2 minutes, but could potentially take 7 minutes or longer", and meanwhile a principal
"might not be able to use a recently granted role" (cloud.google.com/iam/docs/
access-change-propagation). The policy itself reads back at once (getIamPolicy shows the
new binding: the fake gcloud writes it to the state file); what lags is the check of a
request. ``Propagation.delay_s`` (0 by default: a grant is enforced at once, as the fake did
before) is that lag, counted from the time the fake gcloud made the binding
(fakecloud_state.stamp_grant) or a test says it was made (``granted``).
``Propagation.lagging_checks`` is the same lag counted in requests instead: the first that
many requests a grant would allow are refused, then it is enforced. A test that needs the
lag to end within its run uses it: a lag in seconds had to be long enough for the first
request to come before it ended on a loaded machine (20 s), and every test waited it out.

A refused request is answered the way Cloud Storage's JSON API answers it: HTTP 403 with
``{"error": {"code": 403, "message": "<account> does not have <permission> access to the
Google Cloud Storage object. Permission '<permission>' denied on resource (or it may not
exist).", "errors": [{"reason": "forbidden", ...}]}}``, which google-cloud-storage raises as
``google.api_core.exceptions.Forbidden: 403 <METHOD> <url>: <message>`` (``refusal``: the
traceback a program prints).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

# The storage roles the infra stage and its Terraform grant and what they allow (predefined roles,
# cloud.google.com/storage/docs/access-control/iam-roles)
ROLE_PERMISSIONS: dict[str, tuple[str, ...]] = {
    "roles/storage.admin": ("storage.",),
    "roles/storage.objectAdmin": ("storage.objects.",),
    "roles/storage.legacyBucketReader": ("storage.buckets.get", "storage.objects.list"),
    # the blueprint's node pool account keeps it in bucket-scoped mode (its Terraform grant)
    "roles/storage.objectViewer": ("storage.objects.get", "storage.objects.list"),
}


@dataclass
class Propagation:
    delay_s: float = 0.0
    grants: dict[str, float] = field(default_factory=dict)  # "member role" → epoch made
    refused: int = 0  # requests refused so far (the lag, or no grant at all)
    lagging_checks: int = 0  # requests refused although a grant allows them (the lag)

    def granted(self, member: str, role: str, at: float | None = None) -> None:
        self.grants[f"{member} {role}"] = time.time() if at is None else at

    def from_state(self, state: dict) -> None:
        """The grants the fake gcloud made (the state file's stamps)."""
        self.grants.update(state.get("grant_times") or {})

    def allows(self, member: str, permission: str, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        for key, at in self.grants.items():
            who, role = key.rsplit(" ", 1)
            if who == member and permission.startswith(ROLE_PERMISSIONS.get(role, ("\0",))) \
                    and now - at >= self.delay_s:
                return True
        return False

    def refusal(self, member: str, permission: str, bucket: str, name: str) -> list[str] | None:
        """None if allowed; else the program's traceback for its refused upload."""
        if self.allows(member, permission):
            if self.lagging_checks <= 0:
                return None
            self.lagging_checks -= 1
        self.refused += 1
        email = member.removeprefix("serviceAccount:")  # a principal:// stays as it is
        message = (f"{email} does not have {permission} access to the Google Cloud Storage "
                   f"object. Permission '{permission}' denied on resource (or it may not "
                   "exist).")
        return ["Traceback (most recent call last):",
                '  File "/usr/local/lib/python3.12/site-packages/google/cloud/storage/'
                'blob.py", line 2983, in upload_from_file',
                "    _raise_from_invalid_response(exc)",
                f"google.api_core.exceptions.Forbidden: 403 POST https://storage.googleapis.com"
                f"/upload/storage/v1/b/{bucket}/o?uploadType=multipart&name={name}: {message}"]
