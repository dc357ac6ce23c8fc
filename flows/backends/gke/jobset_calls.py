"""The calls a GKE stage makes around its JobSet besides creating and watching it: the
Secret and the programs' ConfigMap before, the deletion after (a resubmission, a fallback to
the next capacity mode, a cancel). A mixin of GkeBackend (backend.py), which keeps the
protocol and the run loop; every call goes through its ``_call`` (retries, budget)."""

from __future__ import annotations

import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from flows.backends.gke.jobs.program_files import program_files_configmap
from flows.backends.gke.jobs.secret_objects import secret_with_value
from flows.backends.gke.watch.client import JOBSET_GROUP, JOBSET_VERSION, JOBSETS
from flows.backends.gke.watch.forbidden import denied_by, forbidden_diagnosis
from flows.core.failures import Diagnosis, FailureCategory, StageFailed
from flows.core.retry import is_infrastructure_fault
from flows.core.secrets import SecretTooShort, SecretUnavailable, resolve
from flows.core.workload import Workload


class JobSetCalls:
    """Needs GkeBackend's profile, cluster, options, redactor, logger, budgets, stage,
    ``_call`` and ``_get``."""

    profile: Any
    cluster: Any
    options: Any
    redactor: Any
    logger: Any
    budgets: Any
    stage: str
    _call: Any
    _get: Any

    def _apply_secrets(self, workload: Workload) -> None:
        """Create or update the Secret of each secret env var, from its reference."""
        core, ns = self.cluster.core, self.profile.gke.namespace
        for _, ref in workload.secret_env:
            try:
                value = resolve(ref, project=self.profile.gke.project if self.profile.gke else None)
            except SecretUnavailable as exc:
                raise StageFailed(self.stage, Diagnosis(
                    FailureCategory.USER_ERROR, f"the secret {ref.describe()} is "
                    f"{'not a usable token' if isinstance(exc, SecretTooShort) else 'unavailable'}",
                    f"    {exc}", "set it, then run again; nothing was submitted")) from None
            self.redactor.add(value)
            body = secret_with_value(ref, ns, value, self.options.hf_token_key)
            name = body["metadata"]["name"]
            try:
                self._call(f"create Secret {name}", core.create_namespaced_secret, ns, body)
            except ApiException as exc:
                if exc.status != 409:
                    raise self._api_failure(f"create Secret {name}", exc) from None
                try:
                    self._call(f"update Secret {name}", core.replace_namespaced_secret, name,
                               ns, body)
                except ApiException as again:
                    raise self._api_failure(f"update Secret {name}", again) from None
            self.logger.info("Secret %s holds %s (value not shown)", name, ref.describe())

    def _ship_programs(self, workload: Workload) -> None:
        """Create the ConfigMap of the programs the workload ships (flows/backends/gke/jobs/
        program_files.py). Named by content and immutable: a 409 means these bytes are there."""
        if not workload.files:
            return
        ns = self.profile.gke.namespace
        body = program_files_configmap(workload.files, ns)
        name = body["metadata"]["name"]
        try:
            self._call(f"create ConfigMap {name}", self.cluster.core.create_namespaced_config_map,
                       ns, body)
        except ApiException as exc:
            if exc.status != 409:
                raise self._api_failure(f"create ConfigMap {name}", exc) from None
        self.logger.info("ConfigMap %s holds %s, mounted at /tpurl/programs", name,
                         ", ".join(f"{f.name} ({f.digest})" for f in workload.files))

    def _delete(self, name: str, wait: bool, within_s: float | None = None) -> None:
        try:
            self._call(f"delete JobSet {name}", self.cluster.custom.delete_namespaced_custom_object,
                       JOBSET_GROUP, JOBSET_VERSION, self.profile.gke.namespace, JOBSETS, name,
                       body={"propagationPolicy": "Foreground"}, within_s=within_s)
        except ApiException as exc:
            if exc.status != 404:
                raise self._api_failure(f"delete JobSet {name}", exc) from None
        if wait:
            self._wait_gone(name)

    def _wait_gone(self, name: str) -> None:
        deadline = time.monotonic() + self.budgets.delete_wait_s
        while time.monotonic() < deadline:
            if self._get(name) is None:
                return
            time.sleep(min(1.0, self.budgets.tick_s))
        raise StageFailed(self.stage, Diagnosis(
            FailureCategory.INFRASTRUCTURE, f"JobSet {name} was not deleted within "
            f"{self.budgets.delete_wait_s:.0f} s", "    it still has a deletionTimestamp",
            "a finalizer or a stuck pod holds it; check `kubectl describe jobset`"))

    def _cancel(self, name: str) -> None:
        """Best effort on the way out (bounded: the stage is over): a failure here must not
        mask the interruption or the diagnosis."""
        try:
            self._delete(name, wait=False, within_s=min(self.budgets.api_s, 30.0))
        except BaseException as exc:  # never mask the interruption itself
            self.logger.warning("could not delete JobSet %s: %s; delete it by hand", name,
                                self.redactor(str(exc)[:300]))

    def _api_failure(self, what: str, exc: ApiException) -> StageFailed:
        """A call the API refused: a 403 names the missing grant (watch/forbidden.py)."""
        if (denied := denied_by(exc)) is not None:
            return StageFailed(self.stage, forbidden_diagnosis(what, denied))
        category = (FailureCategory.INFRASTRUCTURE if is_infrastructure_fault(exc)
                    else FailureCategory.USER_ERROR)
        return StageFailed(self.stage, Diagnosis(
            category, f"the Kubernetes API refused to {what}: HTTP {exc.status} {exc.reason}",
            f"    {self.redactor(str(exc.body or '')[:1000])}",
            "check the cluster's JobSet/Kueue versions and the flow's RBAC"))
