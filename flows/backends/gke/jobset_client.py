"""The Kubernetes calls a GKE stage makes around its JobSet: create, read, list, delete and
wait until gone, and before it the Secret and the programs' ConfigMap.

One object per stage, built by GkeBackend (backend.py) with what the calls need and nothing
else, so the run loop reads as decisions and this module as calls. Every call goes through
``call``: retried with backoff on infrastructure faults for the API budget, and a refusal the
caller does not interpret (a 403, a 422) becomes the stage's diagnosis (``api_failure``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException

from flows.backends.gke.jobs.program_files import ShippedFileRefused, program_files_configmap
from flows.backends.gke.jobs.secret_objects import secret_with_value
from flows.backends.gke.watch.client import (
    JOBSET_GROUP,
    JOBSET_VERSION,
    JOBSETS,
    Cluster,
    api_reason,
    short_error,
)
from flows.backends.gke.watch.forbidden import denied_by, forbidden_diagnosis
from flows.common.api_objects import Obj
from flows.common.failure_codes import Failure
from flows.core.backend import StageLogger
from flows.core.budgets import Budgets
from flows.core.failures import Diagnosis, FailureCategory, StageFailed
from flows.core.retry import RetryPolicy, call_within, is_infrastructure_fault
from flows.core.secrets import Redactor, SecretTooShort, SecretUnavailable, resolve
from flows.core.workload import Workload


class JobSetClient:
    """The calls of one stage in one namespace. ``cluster`` is asked on each call, so a
    stage whose output is already there never connects. ``budgets`` bounds the calls
    (``api_s``, ``queue_s``) and the wait for a deletion (``delete_wait_s``, ``tick_s``);
    ``secret_owner`` is whose Secrets the stage writes (jobs/secret_objects.py);
    ``api_attempts`` caps the attempts of one call (0: only the time budget bounds them)."""

    def __init__(self, cluster: Callable[[], Cluster], *, namespace: str, project: str,
                 stage: str, budgets: Budgets, redactor: Redactor, logger: StageLogger,
                 hf_token_key: str, secret_owner: str, api_attempts: int = 0,
                 api_backoff_s: float = 1.0) -> None:
        self._cluster = cluster
        self.namespace, self.project, self.stage = namespace, project, stage
        self.budgets, self.redactor, self.logger = budgets, redactor, logger
        self.hf_token_key, self.secret_owner = hf_token_key, secret_owner
        self.api_attempts, self.api_backoff_s = api_attempts, api_backoff_s

    def create(self, body: Obj) -> Obj | None:
        """The JobSet created, or None when one of that name exists (409): what to do then
        is the caller's decision (recovery.on_conflict)."""
        name = body["metadata"]["name"]
        try:
            return self.call(f"create JobSet {name}",
                             self._cluster().custom.create_namespaced_custom_object,
                             JOBSET_GROUP, JOBSET_VERSION, self.namespace, JOBSETS, body)
        except ApiException as exc:
            if exc.status != 409:
                raise self.api_failure(f"create JobSet {name}", exc) from None
            return None

    def get(self, name: str) -> Obj | None:
        """The JobSet of that name, or None if there is none."""
        try:
            return self.call(f"read JobSet {name}",
                             self._cluster().custom.get_namespaced_custom_object,
                             JOBSET_GROUP, JOBSET_VERSION, self.namespace, JOBSETS, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise self.api_failure(f"read JobSet {name}", exc) from None

    def list(self, what: str, label_selector: str) -> list[Obj]:
        """The JobSets the selector matches (``what`` names them in errors)."""
        try:
            found: Obj = self.call(f"list JobSets of {what}",
                                   self._cluster().custom.list_namespaced_custom_object,
                                   JOBSET_GROUP, JOBSET_VERSION, self.namespace, JOBSETS,
                                   label_selector=label_selector)
        except ApiException as exc:  # a 403 names the grant (watch/forbidden.py)
            raise self.api_failure(f"list JobSets of {what}", exc) from None
        return found.get("items") or []

    def delete(self, name: str, wait: bool, within_s: float | None = None) -> None:
        """Foreground: the pods go before the JobSet, so a gone JobSet holds no chips."""
        try:
            self.call(f"delete JobSet {name}", self._cluster().custom.delete_namespaced_custom_object,
                      JOBSET_GROUP, JOBSET_VERSION, self.namespace, JOBSETS, name,
                      body={"propagationPolicy": "Foreground"}, within_s=within_s)
        except ApiException as exc:
            if exc.status != 404:
                raise self.api_failure(f"delete JobSet {name}", exc) from None
        if wait:
            self.wait_gone(name)

    def wait_gone(self, name: str) -> None:
        """Until the JobSet is gone: never two JobSets of one stage at once."""
        deadline = time.monotonic() + self.budgets.delete_wait_s
        while time.monotonic() < deadline:
            if self.get(name) is None:
                return
            time.sleep(min(1.0, self.budgets.tick_s))
        raise StageFailed(self.stage, Diagnosis(
            FailureCategory.INFRASTRUCTURE, f"JobSet {name} was not deleted within "
            f"{self.budgets.delete_wait_s:.0f} s", "    it still has a deletionTimestamp",
            "a finalizer or a stuck pod holds it; check `kubectl describe jobset`"))

    def cancel(self, name: str) -> None:
        """Best effort on the way out (bounded: the stage is over): a failure here must not
        mask the interruption or the diagnosis."""
        try:
            self.delete(name, wait=False, within_s=min(self.budgets.api_s, 30.0))
        except BaseException as exc:  # never mask the interruption itself
            self.logger.warning("could not delete JobSet %s: %s; delete it by hand", name,
                                self.redactor(str(exc)[:300]))

    # --- what the JobSet mounts ------------------------------------------------------------
    def apply_secrets(self, workload: Workload) -> None:
        """Create or update the Secret of each secret env var, from its reference: the
        owner's own Secret of that source (another team's is another name, never written)."""
        core, ns = self._cluster().core, self.namespace
        for _, ref in workload.secret_env:
            try:
                value = resolve(ref, project=self.project)
            except SecretUnavailable as exc:
                raise StageFailed(self.stage, Diagnosis(
                    FailureCategory.USER_ERROR, f"the secret {ref.describe()} is "
                    f"{'not a usable token' if isinstance(exc, SecretTooShort) else 'unavailable'}",
                    f"    {exc}", "set it, then run again; nothing was submitted")) from None
            self.redactor.add(value)
            body = secret_with_value(ref, ns, self.secret_owner, value, self.hf_token_key)
            name = body["metadata"]["name"]
            try:
                self.call(f"create Secret {name}", core.create_namespaced_secret, ns, body)
            except ApiException as exc:
                if exc.status != 409:
                    raise self.api_failure(f"create Secret {name}", exc) from None
                try:
                    self.call(f"update Secret {name}", core.replace_namespaced_secret, name,
                              ns, body)
                except ApiException as again:
                    raise self.api_failure(f"update Secret {name}", again) from None
            self.logger.info("Secret %s holds %s (value not shown)", name, ref.describe())

    def ship_programs(self, workload: Workload) -> None:
        """Create the ConfigMap of the programs the workload ships (flows/backends/gke/jobs/
        program_files.py). Named by content and immutable; on a 409 the one there is read and
        used only if it holds exactly these bytes, immutable (a rerun's, or anyone's with the
        same bytes: either way what the pods mount can never be other than what was
        planned). Anything else under the name (other bytes, a mutable object someone may
        edit later) fails the stage naming it, and is left as it is: the name is computable
        by whoever may create ConfigMaps in the namespace, so it proves nothing."""
        if not workload.files:
            return
        ns = self.namespace
        try:
            body = program_files_configmap(workload.files, ns)
        except ShippedFileRefused as exc:  # a recipe edited after the plan: nothing submitted
            raise StageFailed(self.stage, Diagnosis(
                FailureCategory.USER_ERROR, f"a file {workload.name} ships is not the one the "
                "run planned", f"    {exc}", "run again once the file is as you want it: "
                "the new run is keyed by its bytes; nothing was submitted",
                Failure.GKE_SHIPPED_FILE_CHANGED)) from None
        name = body["metadata"]["name"]
        try:
            self.call(f"create ConfigMap {name}", self._cluster().core.create_namespaced_config_map,
                      ns, body)
        except ApiException as exc:
            if exc.status != 409:
                raise self.api_failure(f"create ConfigMap {name}", exc) from None
            self._same_programs(body)
        self.logger.info("ConfigMap %s holds %s, mounted at /tpurl/programs", name,
                         ", ".join(f"{f.name} ({f.digest})" for f in workload.files))

    def _same_programs(self, ours: Obj) -> None:
        """The ConfigMap already under ``ours``' name holds ``ours``' data and nothing else,
        immutable; else StageFailed naming it (nothing submitted, nothing deleted)."""
        name, ns = ours["metadata"]["name"], self.namespace
        try:
            there: Any = self.call(f"read ConfigMap {name}",
                                   self._cluster().core.read_namespaced_config_map, name, ns)
        except ApiException as exc:
            raise self.api_failure(f"read ConfigMap {name}", exc) from None
        found = there.to_dict() if hasattr(there, "to_dict") else dict(there)
        problems = []
        if (found.get("data") or {}) != ours["data"] or found.get("binary_data",
                                                                   found.get("binaryData")):
            problems.append("its files are not the ones this run ships")
        if found.get("immutable") is not True:
            problems.append("it is not immutable, so it could be changed after this check")
        if not problems:
            return
        raise StageFailed(self.stage, Diagnosis(
            FailureCategory.USER_ERROR, f"the namespace holds a ConfigMap {name} that is not the "
            f"programs this run ships ({'; '.join(problems)})",
            f"    ConfigMap {ns}/{name}: the name is computed from the programs' bytes; the "
            "pods would mount whatever it holds", f"see who created it (`kubectl get configmap "
            f"{name} -n {ns} -o yaml`); if it is no one's, `kubectl delete configmap {name} -n "
            f"{ns}` and run again; nothing was submitted", Failure.GKE_CONFIGMAP_NOT_OURS))

    def call(self, what: str, fn: Callable[..., Any], *args: Any,
             within_s: float | None = None, **kwargs: Any) -> Any:
        """One API call, retried with backoff (Retry-After honoured) on 5xx/429/connection
        errors (flows.core.retry) for ``within_s``: by default ``Budgets.api_s`` but never
        longer than the queue budget, so an API that stays down fails the stage within its
        budget. Other errors (404, 409, 422) are the caller's to interpret. The answer is
        the client's, untyped (the API's JSON as dicts)."""
        budget = within_s if within_s is not None else min(self.budgets.api_s,
                                                          self.budgets.queue_s)
        policy = RetryPolicy(attempts=self.api_attempts, base_s=self.api_backoff_s, max_s=30.0)

        def notice(attempt: int, message: str, wait_s: float) -> None:
            self.logger.warning("API error while trying to %s (%s); retry %d in %.1f s",
                                what, self.redactor(message), attempt, wait_s)

        try:
            return call_within(lambda: fn(*args, **kwargs), policy, time.monotonic() + budget,
                               notice, text=api_reason)
        except Exception as exc:
            if not is_infrastructure_fault(exc):
                raise
            raise StageFailed(self.stage, Diagnosis(
                FailureCategory.INFRASTRUCTURE,
                f"the Kubernetes API kept failing while trying to {what} ({short_error(exc)})",
                f"    {self.redactor(api_reason(exc))}",
                f"the control plane is unavailable or overloaded; retried with backoff for "
                f"up to {budget:.0f} s"),
            ) from None

    def api_failure(self, what: str, exc: ApiException) -> StageFailed:
        """A call the API refused: a 403 names the missing grant (watch/forbidden.py)."""
        if (denied := denied_by(exc)) is not None:
            return StageFailed(self.stage, forbidden_diagnosis(what, denied))
        category = (FailureCategory.INFRASTRUCTURE if is_infrastructure_fault(exc)
                    else FailureCategory.USER_ERROR)
        return StageFailed(self.stage, Diagnosis(
            category, f"the Kubernetes API refused to {what}: HTTP {exc.status} {exc.reason}",
            f"    {self.redactor(str(exc.body or '')[:1000])}",
            "check the cluster's JobSet/Kueue versions and the flow's RBAC"))
