"""A 403 read as the API server writes it (watch/forbidden.py): the permission named from the
Status message of every shape the fake API produces (tests/fakes/kube_api/rbac.py, after
responsewriters/errors.go), namespaced, cluster-scoped and with a subresource; anything but
a 403 is not a refusal."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from flows.backends.gke.watch.forbidden import FORBIDDEN_CODE, denied_by, forbidden_diagnosis
from flows.core.failures import FailureCategory
from tests.fakes.kube_api.rbac import Attributes, forbidden

USER = "system:serviceaccount:default:tpurl-flow"


def refusal(attrs: Attributes) -> ApiException:
    error = forbidden(USER, attrs)
    exc = ApiException(status=error.code, reason=error.reason)
    exc.body = json.dumps(error.status()).encode()
    return exc


@pytest.mark.parametrize(("attrs", "permission"), [
    (Attributes("list", "autoscaling.x-k8s.io", "provisioningrequests", "default"),
     'list provisioningrequests (API group "autoscaling.x-k8s.io") in namespace default'),
    (Attributes("get", "", "pods/log", "default", "head-0"),
     "get pods/log (the core API group) in namespace default"),
    (Attributes("get", "", "nodes", "", "gke-tpu-1"),
     "get nodes (the core API group) at the cluster scope"),
    (Attributes("update", "", "secrets", "ml", "tpurl-env-x-1"),
     "update secrets (the core API group) in namespace ml"),
])
def test_the_permission_is_read_from_the_api_servers_message(attrs: Attributes,
                                                             permission: str) -> None:
    denied = denied_by(refusal(attrs))
    assert denied is not None and denied.permission == permission
    diagnosis = forbidden_diagnosis("do it", denied)
    assert diagnosis.code == FORBIDDEN_CODE and diagnosis.category is FailureCategory.USER_ERROR
    assert permission in diagnosis.summary and "deployments/work-pool/rbac.yaml" in diagnosis.fix
    assert ("tpurl plan PROFILE" in diagnosis.fix) == (attrs.resource == "secrets")


def test_a_403_of_another_shape_still_counts_and_other_errors_do_not() -> None:
    odd = ApiException(status=403, reason="Forbidden")
    odd.body = b"forbidden by a webhook"
    denied = denied_by(odd)
    assert denied is not None and denied.message == "forbidden by a webhook"
    assert "a permission (HTTP 403, its message names none)" in forbidden_diagnosis(
        "x", denied).summary
    for status in (401, 404, 409, 500):
        assert denied_by(ApiException(status=status)) is None
    assert denied_by(ConnectionError("reset")) is None


def test_a_teams_flow_account_is_told_to_apply_its_teams_role() -> None:
    """The API server names the refused user: a team's flow account is sent to its team's
    Role file (deployments/work-pool/teams/TEAM/rbac.yaml), not the shared one."""
    from flows.backends.gke.flow_pools import flow_account_id

    attrs = Attributes("update", "", "secrets", "default", "tpurl-team-tutorial-env-x-1")
    err = forbidden(f"system:serviceaccount:default:{flow_account_id('tutorial')}", attrs)
    exc = ApiException(status=403, reason="Forbidden")
    exc.body = json.dumps(err.status()).encode()
    denied = denied_by(exc)
    assert denied is not None
    fix = forbidden_diagnosis("do it", denied).fix
    assert "kubectl apply -f deployments/work-pool/teams/tutorial/rbac.yaml" in fix
