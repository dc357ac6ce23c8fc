"""What a team's flow account may put in a JobSet: an admission policy per team, generated
beside its Role (deployments/work-pool/teams/TEAM/admission.yaml).

Why (docs/decisions/0040-an-admission-policy-per-flow-account.md): RBAC lets a flow account
create JobSets in the namespace every team shares, but it authorises the create, not what the
JobSet's pod templates run as or mount; the JobSet controller, not the flow account, creates
the pods. So code in team B's flow pod could start a pod as ``tpurl-team-A`` or mounting A's
Secret. The ValidatingAdmissionPolicy below (admissionregistration.k8s.io/v1, GA in
Kubernetes 1.30: kubernetes/kubernetes staging/src/k8s.io/api/admissionregistration/v1/
types.go) applies to a create or update of a JobSet whose requester is the team's flow
account (``request.userInfo.username`` in its matchCondition) and denies it unless every pod
template in it:

- runs as the team's account ``tpurl-team-TEAM``, or as the namespace's ``default`` (absent,
  empty or named): the Pathways workers the product renders run Pathways' own image on the
  host network with no account named (jobs/common.py ``host_network``), and ``default`` is
  bound to no Role and no Google account;
- names only the team's own Secrets, exactly those its Role may update (``team_secrets``, the
  same list), in env ``secretKeyRef``, ``envFrom`` ``secretRef``, ``secret`` and projected
  ``secret`` volumes and ``imagePullSecrets``. Exact names, not the prefix ``tpurl-team-TEAM-``:
  team ``a``'s prefix is also the start of team ``a-b``'s Secrets;
- mounts no volume that reads the node or names Secrets of its own (``NODE_VOLUME_KINDS``:
  a hostPath reads the kubelet's credentials, a csi or iscsi volume names a Secret);
- selects and tolerates only its team's node pools: a ``tpurl/team`` node selector and a
  ``tpurl/team`` toleration name the team (decision 0036's label and taint,
  capacity_pools.py), no toleration without a key (it tolerates every taint), no
  ``nodeName`` (it skips the scheduler and its taints), and a host-network pod selects the
  team's pools (it acts as their node account, team_identity.py).

The flow account of profiles in no team (``tpurl-flow``) gets one too
(deployments/work-pool/admission.yaml, ``teamless_policy``): its pods run as the namespace's
``default``, name only Secrets a profile in no team owns (``PROFILE_SECRET_PREFIX``), mount
nothing of the node, and select and tolerate no team's pool. Its Secrets are matched by
prefix: every profile in no team shares that one account and Role, so the boundary is the
teams' (decision 0040 says why).

The flow submits JobSets only (its Role grants no Job or Pod create), so the policy matches
JobSets. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from flows.backends.gke.capacity_pools import TEAM_LABEL
from flows.backends.gke.team_identity import team_account

API = "admissionregistration.k8s.io/v1"
JOBSET_GROUP = "jobset.x-k8s.io"
NO_ACCOUNT = ("", "default")
# The Secrets a profile in no team owns: jobs/naming.py secret_name of owner ``profile:NAME``
# (a team's are ``tpurl-team-...``: owner ``team:NAME``)
PROFILE_SECRET_PREFIX = "tpurl-profile-"
# The volume kinds a team's pod may not mount: each reads the node's files or runs on the
# node (hostPath, gitRepo) or names a Secret by a field of its own (core/v1 types.go's
# VolumeSource). Refused by name, not allowed by list: on the API server the expression is
# type-checked against the JobSet's schema, where a volume is an object whose fields can be
# tested with has() but not iterated. The product renders emptyDir only.
NODE_VOLUME_KINDS = ("hostPath", "gitRepo", "csi", "flexVolume", "iscsi", "rbd", "cephfs",
                     "azureFile", "cinder", "scaleIO", "storageos")


def policy_name(flow_account: str) -> str:
    """The policy's and its binding's name, from the flow account's (at most 30 characters)."""
    return f"{flow_account}-jobsets"


def _cel_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _rule(expression: str, message: str) -> dict[str, str]:
    return {"expression": expression, "message": message, "reason": "Forbidden"}


def _secret_rules(who: str, secret_ok: Callable[[str], str], allowed: str, fix: str
                  ) -> list[dict[str, str]]:
    """The Secret and volume rules; ``secret_ok(field)``: the CEL test of a Secret's name."""
    def env_ok(containers: str) -> str:
        return (f"(has(p.{containers}) ? p.{containers} : []).all(c, "
                "(!has(c.env) || c.env.all(e, !has(e.valueFrom) || "
                "!has(e.valueFrom.secretKeyRef) || (has(e.valueFrom.secretKeyRef.name) && "
                + secret_ok("e.valueFrom.secretKeyRef.name") + "))) && (!has(c.envFrom) || "
                "c.envFrom.all(f, !has(f.secretRef) || (has(f.secretRef.name) && "
                + secret_ok("f.secretRef.name") + "))))")
    return [
        _rule(f"variables.pods.all(p, {env_ok('containers')} && {env_ok('initContainers')})",
              f"containers[].env[].valueFrom.secretKeyRef.name / envFrom[].secretRef.name: "
              f"{who} may name only {allowed}; fix: {fix}"),
        _rule("variables.pods.all(p, !has(p.volumes) || p.volumes.all(v, "
              + "".join(f"!has(v.{kind}) && " for kind in NODE_VOLUME_KINDS)
              + "(!has(v.secret) || (has(v.secret.secretName) && "
              + secret_ok("v.secret.secretName") + ")) && (!has(v.projected) || "
              "!has(v.projected.sources) || v.projected.sources.all(s, !has(s.secret) || "
              "(has(s.secret.name) && " + secret_ok("s.secret.name") + ")))))",
              f"volumes[]: {who} may mount only {allowed} and no volume of the kinds "
              f"{', '.join(NODE_VOLUME_KINDS)}; fix: {fix}"),
        _rule("variables.pods.all(p, !has(p.imagePullSecrets) || p.imagePullSecrets.all(s, "
              "has(s.name) && " + secret_ok("s.name") + "))",
              f"imagePullSecrets[].name: {who} may name only {allowed}; fix: {fix}"),
    ]


def _account_rule(who: str, accounts: str, fix: str) -> dict[str, str]:
    return _rule("variables.pods.all(p, (!has(p.serviceAccountName) || p.serviceAccountName in "
                 "variables.accounts) && (!has(p.serviceAccount) || p.serviceAccount in "
                 "variables.accounts))",
                 f"spec.replicatedJobs[].template.spec.template.spec.serviceAccountName: {who} "
                 f"may start pods as {accounts} only; fix: {fix}")


def validations(team: str, secrets: Iterable[str]) -> list[dict[str, str]]:
    """The CEL rules, each with a message naming the field and the fix."""
    account = team_account(team)
    allowed = _cel_list(secrets)
    who = f"team {team}'s flow"
    fix = (f"render the JobSet with tpurl for team {team} (its pods run as {account} and "
           f"mount the team's Secrets of deployments/work-pool/teams/{team}/rbac.yaml)")
    return [
        _account_rule(who, f"{account} (or the namespace's default)", fix),
        *_secret_rules(who, lambda field: f"{field} in variables.secrets",
                       f"the team's Secrets {allowed}", fix),
        _rule("variables.pods.all(p, (!has(p.nodeName) || p.nodeName == '') && "
              f"(!has(p.nodeSelector) || !('{TEAM_LABEL}' in p.nodeSelector) || "
              f"p.nodeSelector['{TEAM_LABEL}'] == variables.team) && "
              "(!has(p.hostNetwork) || !p.hostNetwork || (has(p.nodeSelector) && "
              f"'{TEAM_LABEL}' in p.nodeSelector)))",
              f"nodeSelector['{TEAM_LABEL}'] / nodeName / hostNetwork: team {team}'s flow may "
              f"place pods on team {team}'s pools only (nodeSelector {TEAM_LABEL}: {team}; a "
              f"host-network pod must select them; no nodeName); fix: {fix}"),
        _rule("variables.pods.all(p, !has(p.tolerations) || p.tolerations.all(t, "
              "has(t.key) && t.key != '' && (t.key != "
              f"'{TEAM_LABEL}' || ((!has(t.operator) || t.operator == 'Equal') && "
              "has(t.value) && t.value == variables.team))))",
              f"tolerations[]: team {team}'s flow may tolerate the taint {TEAM_LABEL}={team} "
              f"only (operator Equal, a key on every toleration); fix: {fix}"),
    ]


def teamless_validations(flow_account: str) -> list[dict[str, str]]:
    """The rules of the flow account of profiles in no team: its pods run as the namespace's
    default, name only Secrets a profile in no team owns (``PROFILE_SECRET_PREFIX``), mount
    nothing of the node, and select and tolerate no team's pool (decision 0036's taint keeps
    them off, a toleration or selector of ``tpurl/team`` would put them there)."""
    who = f"the flow of profiles in no team ({flow_account})"
    fix = ("render the JobSet with tpurl for a profile in no team (its pods run as the "
           "namespace's default and mount the profile's own Secrets, tpurl-profile-...)")
    return [
        _account_rule(who, "the namespace's default", fix),
        *_secret_rules(who, lambda field: f"{field}.startsWith('{PROFILE_SECRET_PREFIX}')",
                       f"Secrets of profiles in no team ({PROFILE_SECRET_PREFIX}...)", fix),
        _rule("variables.pods.all(p, (!has(p.nodeName) || p.nodeName == '') && "
              f"(!has(p.nodeSelector) || !('{TEAM_LABEL}' in p.nodeSelector)))",
              f"nodeSelector['{TEAM_LABEL}'] / nodeName: {who} may place pods on no team's "
              f"pools (no {TEAM_LABEL} node selector, no nodeName); fix: {fix}"),
        _rule("variables.pods.all(p, !has(p.tolerations) || p.tolerations.all(t, "
              f"has(t.key) && t.key != '' && t.key != '{TEAM_LABEL}'))",
              f"tolerations[]: {who} may tolerate no team's taint {TEAM_LABEL} (and every "
              f"toleration names a key); fix: {fix}"),
    ]


def _policy(name: str, labels: dict[str, str], username: str, team: str,
            accounts: Iterable[str], secrets: Iterable[str],
            rules: list[dict[str, str]]) -> list[dict[str, Any]]:
    pods = ("object.spec.replicatedJobs.map(r, r.template.spec.template.spec)")
    policy = {
        "apiVersion": API, "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [JOBSET_GROUP], "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE"], "resources": ["jobsets"]}]},
            "matchConditions": [{
                "name": "requested-by-the-teams-flow" if team else "requested-by-the-flow",
                "expression": f"request.userInfo.username == '{username}'"}],
            "variables": [
                {"name": "team", "expression": f"'{team}'"},
                {"name": "accounts", "expression": _cel_list(accounts)},
                {"name": "secrets", "expression": _cel_list(secrets)},
                {"name": "pods", "expression": f"has(object.spec.replicatedJobs) ? {pods} : []"},
            ],
            "validations": rules,
        },
    }
    binding = {
        "apiVersion": API, "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": labels},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]


def team_policy(team: str, flow_account: str, secrets: Iterable[str],
                namespace: str = "default") -> list[dict[str, Any]]:
    """The team's ValidatingAdmissionPolicy and its binding (validationActions: Deny)."""
    names = list(secrets)
    return _policy(policy_name(flow_account),
                   {"app.kubernetes.io/managed-by": "tpurl", TEAM_LABEL: team},
                   f"system:serviceaccount:{namespace}:{flow_account}", team,
                   [*NO_ACCOUNT, team_account(team)], names, validations(team, names))


def teamless_policy(flow_account: str, namespace: str = "default") -> list[dict[str, Any]]:
    """The policy and binding of the flow account of profiles in no team."""
    return _policy(policy_name(flow_account), {"app.kubernetes.io/managed-by": "tpurl"},
                   f"system:serviceaccount:{namespace}:{flow_account}", "", NO_ACCOUNT, [],
                   teamless_validations(flow_account))
