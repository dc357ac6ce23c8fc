"""Pure: a pod the kubelet evicted for disk, as what it outgrew and the profile field that
sizes it, so a full disk on GKE reads like one in the rehearsal (category user-error, code
``storage/ephemeral-storage``) instead of a generic failure or a retried disruption.

The kubelet's eviction messages (kubernetes pkg/kubelet/eviction/helpers.go):
``nodeLowMessageFmt`` "The node was low on resource: %v. ", ``containerMessageFmt``
"Container %s was using %s, request is %s, has larger consumption of %v. " (since
Kubernetes 1.26, kubernetes#111597; the older "Container %s was using %s, which exceeds its
request of %s. " is still read), ``podMessageFmt`` "Pod %s was using %s, request is %s, has
larger consumption of %v. ", ``containerEphemeralStorageMessageFmt`` "Container %s
exceeded its local ephemeral storage limit %q. ", ``podEphemeralStorageMessageFmt`` "Pod
ephemeral local storage usage exceeds the total limit of containers %s. ",
``emptyDirMessageFmt`` "Usage of EmptyDir volume %q exceeds the limit %q. ". A node that ran
low while the evicted pod stayed within its request was filled by someone else: that is a
disruption (resubmitted), not a sizing error.
"""

from __future__ import annotations

import re

from flows.common.failure_codes import Failure

CODE = Failure.STORAGE_EPHEMERAL_STORAGE

_EMPTY_DIR = re.compile(r'Usage of EmptyDir volume "([^"]+)" exceeds the limit "([^"]+)"')
_CONTAINER = re.compile(r'Container (\S+) exceeded its local ephemeral storage limit "([^"]+)"')
_POD = re.compile(r"Pod ephemeral local storage usage exceeds the total limit of containers "
                  r"(\S+?)\.?(\s|$)")
_NODE_LOW = re.compile(r"The node was low on resource: ephemeral-storage")
_OVER_REQUEST = re.compile(r"(Container|Pod) (\S+) was using (\S+), (?:which exceeds its "
                           r"request of|request is) (\S+?)[.,]?(\s|$)")


def over_request(message: str) -> tuple[str, str, str] | None:
    """("container <name>" or "pod <name>", its usage, its request) of a node-pressure
    eviction message, or None."""
    m = _OVER_REQUEST.search(message)
    return (f"{m.group(1).lower()} {m.group(2)}", m.group(3), m.group(4)) if m else None

SCRATCH_FIX = ("raise gke.conversion_scratch_memory (the memory-backed scratch that holds the "
               "HF download and temporary files; gke.conversion_memory must cover it), or "
               "gke.hf_download_gib if the checkpoint is larger than stated")
LIMIT_FIX = ("raise gke.conversion_ephemeral_storage (the pod's disk outside its scratch; the "
             "cpu-np node's boot disk must have that much allocatable)")
NODE_FIX = ("the node's boot disk filled up: raise gke.conversion_ephemeral_storage so the pod "
            "is placed where it fits, and the node pool's disk_size_gb in the blueprint")


def storage_eviction(message: str) -> tuple[str, str] | None:
    """(what the pod outgrew, the fix naming the profile field), or None when the message
    is not an eviction for the pod's own disk use."""
    if m := _EMPTY_DIR.search(message):
        return f'its volume "{m.group(1)}" outgrew its limit of {m.group(2)}', SCRATCH_FIX
    if m := _CONTAINER.search(message):
        return (f"container {m.group(1)} outgrew its ephemeral-storage limit of "
                f"{m.group(2)}", LIMIT_FIX)
    if m := _POD.search(message):
        return f"it outgrew its ephemeral-storage limit of {m.group(1)}", LIMIT_FIX
    if _NODE_LOW.search(message) and (over := over_request(message)):
        return (f"the node ran out of disk while {over[0]} used {over[1]}, over its request "
                f"of {over[2]}", NODE_FIX)
    return None
