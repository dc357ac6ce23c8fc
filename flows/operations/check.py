"""`tpurl check [PROFILE ...]`: what this machine has for each profile it would run, and what
is missing, each missing thing with its fix. Read-only: nothing is installed, created or
started.

Why a command of its own: the same facts are checked where they bite (the flow refuses to
start, the infra stage refuses an unverified bundle, `tpurl plan --check` reads the project),
but a newcomer meets them one failed command at a time. This asks every question at once,
in the order a first run would meet them: the machine, the Prefect API and its work pools,
then per profile its libraries, programs, credentials, secrets and integrations. Nothing
missing ends in a traceback. Exit codes a script can use: 0 all found, 1 something is
missing, 2 a profile that cannot be read.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from flows.common.api_objects import Obj
from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.common.paths import REPO_ROOT
from flows.config.errors import ProfileError
from flows.config.gke_section import gke_section
from flows.config.profile import Profile

WORK_POOL_TEMPLATES = REPO_ROOT / "deployments" / "work-pool"
KUBERNETES_TEMPLATE = "kubernetes-base-job-template.json"


def _pools() -> dict[str, str]:
    """The pools the docs create and their templates: the process pool, the Kubernetes pool
    of profiles in no team, and one Kubernetes pool per team whose files are shipped
    (deployments/work-pool/teams/TEAM/, flows/backends/gke/flow_pools.py)."""
    teams = WORK_POOL_TEMPLATES / "teams"
    return {"tpurl-process": "process-base-job-template.json",
            "tpurl-kubernetes": KUBERNETES_TEMPLATE,
            **{f"tpurl-kubernetes-{d.name}": f"teams/{d.name}/{KUBERNETES_TEMPLATE}"
               for d in sorted(teams.iterdir() if teams.is_dir() else ())
               if (d / KUBERNETES_TEMPLATE).is_file()}}


POOLS = _pools()
GKE_AUTH_PLUGIN = "gke-gcloud-auth-plugin"


@dataclass(frozen=True)
class Finding:
    """One answer: ``ok`` True (found), False (missing: ``fix`` says how), None (not needed
    here, or not checkable until something missing above is fixed)."""

    target: str
    what: str
    ok: bool | None
    detail: str
    fix: str = ""
    code: str = ""

    def render(self) -> str:
        mark = {True: "ok  ", False: "FAIL", None: "--  "}[self.ok]
        code = f" [{self.code}]" if self.code and self.ok is False else ""
        line = f"{mark} {self.what}{code}: {self.detail}"
        return f"{line}\n       fix: {self.fix}" if self.ok is False and self.fix else line


def _from_issue(target: str, issue: Issue) -> Finding:
    return Finding(target, issue.field, False, issue.problem, issue.fix, issue.category)


def machine_findings() -> list[Finding]:
    """The orchestrator's own Python and which optional parts of the project it has."""
    version = ".".join(map(str, sys.version_info[:3]))
    found = [Finding("machine", "python", sys.version_info >= (3, 12),
                     f"the orchestrator runs on Python {version} ({sys.executable})",
                     "Python 3.12: `bash scripts/setup.sh` creates .venv with it")]
    gcp = [name for name in ("kubernetes", "google.cloud.storage", "prefect_gcp",
                             "prefect_kubernetes") if not _importable(name)]
    found.append(Finding("machine", "gcp libraries", True if not gcp else None,
                         "installed" if not gcp else
                         f"not installed ({', '.join(gcp)}): needed by GKE profiles only",
                         "bash scripts/setup.sh --gke"))
    return found


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


def configured_api_url() -> str:
    """PREFECT_API_URL as Prefect resolves it (the environment, then the active Prefect
    profile `prefect config set` writes), "" when none is set."""
    from prefect.settings import get_current_settings

    return str(get_current_settings().api.url or "")


def prefect_findings(api_url: str,
                     read_pool: Callable[[str], Obj | None] | None = None
                     ) -> list[Finding]:
    """The Prefect API deployments use and, when it answers, whether its work pools hold the
    shipped templates (whose variables a run cannot use to run a command or reach another
    cluster: docs/how-to/deploy-prefect-server.md)."""
    url = api_url.rstrip("/")
    if not url:
        return [Finding("prefect", "API", None, "PREFECT_API_URL is not set: `tpurl run` starts "
                        "a private API of its own; deployments and workers need a server "
                        "(docs/how-to/deploy-prefect-server.md)")]
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
            healthy = response.status == 200
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return [Finding("prefect", "API", False, f"{url} does not answer ({_reason(exc)})",
                        "start it (`prefect server start`) or point PREFECT_API_URL at yours; "
                        "`prefect cloud login` for Prefect Cloud")]
    if not healthy:
        return [Finding("prefect", "API", False, f"{url}/health did not answer 200",
                        "check the server's log")]
    found = [Finding("prefect", "API", True, f"{url} answers")]
    read = read_pool or _pool_reader()
    for pool, template_file in POOLS.items():
        found.append(_pool_finding(pool, template_file, read))
    return found


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", "") or exc) or type(exc).__name__


def _pool_reader() -> Callable[[str], Obj | None]:
    def read(name: str) -> Obj | None:
        from prefect.client.orchestration import get_client
        from prefect.exceptions import ObjectNotFound

        with get_client(sync_client=True) as client:
            try:
                return dict(client.read_work_pool(name).base_job_template)
            except ObjectNotFound:
                return None
    return read


def _pool_finding(pool: str, template_file: str,
                  read: Callable[[str], Obj | None]) -> Finding:
    create = (f"`prefect work-pool create {pool} --type "
              f"{'kubernetes' if 'kubernetes' in pool else 'process'} --base-job-template "
              f"deployments/work-pool/{template_file}`")
    try:
        template = read(pool)
    except Exception as exc:  # an API that answers /health but not this: say so, go on
        return Finding("prefect", f"work pool {pool}", False, f"cannot be read ({_reason(exc)})",
                       "check PREFECT_API_URL and PREFECT_API_KEY")
    if template is None:
        return Finding("prefect", f"work pool {pool}", None, "does not exist (needed by the "
                       "deployments that name it in prefect.yaml)", create)
    if shipped_template(pool, template_file, template):
        return Finding("prefect", f"work pool {pool}", True, "exists with the shipped template")
    update = create.replace("work-pool create", "work-pool update").replace(
        " --type kubernetes", "").replace(" --type process", "")
    if template_file.endswith(KUBERNETES_TEMPLATE):  # the shipped file holds no image
        update += ", then `prefect --no-prompt deploy --all` (it pins the flow image again)"
    return Finding("prefect", f"work pool {pool}", False, "exists, but its base job template "
                   "is not the shipped one (a run may be able to set what the shipped one "
                   "fixes, such as the command or the flow Job's Kueue queue)", update)


def shipped_template(pool: str, template_file: str, template: Obj) -> bool:
    """Pure but for reading the shipped file: ``template`` is the shipped one, or (the
    Kubernetes pool) the shipped one with the flow image `prefect deploy` pinned in it."""
    shipped = json.loads((WORK_POOL_TEMPLATES / template_file).read_text())
    if dict(template) == shipped:
        return True
    if not template_file.endswith(KUBERNETES_TEMPLATE):
        return False
    from flows.deploy_steps import FLOW_CONTAINER, pinned_template

    try:
        containers = template["job_configuration"]["job_manifest"]["spec"]["template"][
            "spec"]["containers"]
        image = next(c["image"] for c in containers if c.get("name") == FLOW_CONTAINER)
    except (KeyError, TypeError, StopIteration):
        return False
    return pinned_template(shipped, str(image)) == dict(template)


def profile_findings(name: str, overrides: Mapping[str, str], environ: Mapping[str, str],
                     api_answers: bool = False, import_recipe: bool = False,
                     ) -> tuple[list[Finding], bool]:
    """(what the profile needs here and whether it is found, the profile could be read);
    the recipe's files are imported in the sandbox only with ``import_recipe``."""
    from flows.backends import backend_for
    from flows.config import load_profile

    try:
        profile = load_profile(name, dict(overrides))
    except ProfileError as exc:
        return [_from_issue(name, i) for i in exc.issues], False
    found = [Finding(name, "profile", True, f"valid (backend {profile.backend})")]
    try:
        backend = backend_for(profile)
    except ProfileError as exc:  # a GKE profile without the cloud libraries
        return found + [_from_issue(name, i) for i in exc.issues], True
    if profile.gke is not None:
        found += _gke_findings(profile)
    else:
        found += _local_findings(profile)
    missing = backend.start_issues()
    found += [_from_issue(name, issue) for issue in missing]
    if not missing:
        found.append(Finding(name, "stages", True, "what the stages run here is present "
                             + ("(image builder, gcloud, credentials, the flow identity's "
                                "permissions)" if profile.gke else "(the rehearsal installs "
                                "the rest)")))
    found += _secret_findings(profile, environ)
    found += _recipe_findings(profile, import_recipe)
    found += _integration_findings(profile, environ)
    found += _notify_findings(profile, api_answers)
    return found, True


def _gke_findings(profile: Profile) -> list[Finding]:
    from flows.backends.gke.infra.bundle import expected_checksum
    from flows.backends.gke.infra.settings import settings_from_profile

    gke = gke_section(profile)
    found = [Finding(profile.name, GKE_AUTH_PLUGIN, shutil.which(GKE_AUTH_PLUGIN) is not None,
                     "on PATH" if shutil.which(GKE_AUTH_PLUGIN) else
                     "not on PATH (the kubeconfig `gcloud container clusters get-credentials` "
                     "writes calls it to reach the cluster)",
                     f"gcloud components install {GKE_AUTH_PLUGIN} (or your package manager's "
                     f"google-cloud-cli-gke-gcloud-auth-plugin)", Failure.ENVIRONMENT_NO_GCLOUD)]
    checksum = expected_checksum(settings_from_profile(profile))
    found.append(Finding(
        profile.name, "cluster toolkit bundle", checksum is not None,
        f"Cluster Toolkit {gke.cluster_toolkit_version}: SHA-256 from {checksum[1]}"
        if checksum else f"no SHA-256 is known for Cluster Toolkit "
        f"{gke.cluster_toolkit_version}: the infra stage refuses to download it",
        "set gke.cluster_toolkit_sha256 to the release page's SHA-256 (or add the line to "
        "deployments/cluster-toolkit.sha256)", Failure.INFRA_BUNDLE_UNVERIFIED))
    return found


def _local_findings(profile: Profile) -> list[Finding]:
    """The interpreters the rehearsal's two venvs are created with (unless they exist)."""
    from flows.core.layout import Layout

    layout, local = Layout(profile), profile.local
    if local is None:  # a local profile always has its section; nothing to check without it
        return []
    found = []
    for label, venv, version in (
            ("rehearsal venv", layout.venv_dir(), local.venv_python),
            ("export check venv", layout.hf_check_venv_dir(), local.hf_check_python)):
        if (venv / "bin" / "python").exists():
            found.append(Finding(profile.name, label, True, f"{venv} exists"))
            continue
        ok = _python_answers(version)
        field = "local.venv_python" if label == "rehearsal venv" else "local.hf_check_python"
        found.append(Finding(
            profile.name, label, ok, f"Python {version} "
            + ("found: the image stage creates it" if ok else "is not found (python"
               f"{version} on PATH, or pyenv's {version})"),
            f"install Python {version} (`pyenv install {version}`, or your package manager's "
            f"python{version}), or set {field} to a version you have"))
    return found


def _python_answers(version: str) -> bool:
    python = shutil.which(f"python{version}")
    if python is None:
        return False
    try:
        done = subprocess.run([python, "-c", "import sys; print(sys.version_info[:2])"],
                              env={**os.environ, "PYENV_VERSION": version},
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _secret_findings(profile: Profile, environ: Mapping[str, str]) -> list[Finding]:
    from flows.core.secrets import require_secrets

    ref = profile.model.hf_token
    if ref is None:
        return [Finding(profile.name, "model.hf_token", None, "not set (a public model)")]
    try:
        require_secrets(profile, environ)
    except ProfileError as exc:
        return [_from_issue(profile.name, i) for i in exc.issues]
    return [Finding(profile.name, "model.hf_token", True, f"{ref.describe()} resolves here")]


def _recipe_findings(profile: Profile, import_recipe: bool = False) -> list[Finding]:
    """The recipe's files, read; with ``import_recipe`` imported in the sandbox as MaxText
    will where the rehearsal venv is (else read, with the warning that says what was left
    unchecked)."""
    from flows.core.recipe_check import check_recipe

    if profile.recipe.is_builtin():
        return [Finding(profile.name, "recipe", None, "MaxText's built-in one (nothing of "
                        "the team's to check)")]
    result = check_recipe(profile, unimported=None if import_recipe else (
        "`tpurl check` reads them without running the team's code; `tpurl check "
        "--import-recipe` or `tpurl validate` imports them in a sandbox as MaxText will"))
    if result.issues:
        return [_from_issue(profile.name, i) for i in result.issues]
    found = [Finding(profile.name, "recipe", True, "its files load and MaxText can call "
                     "what they define")]
    return found + [Finding(profile.name, "recipe", None, w.removeprefix("warning: "))
                    for w in result.warnings]


def _integration_findings(profile: Profile, environ: Mapping[str, str]) -> list[Finding]:
    from flows.integrations.preflight import integration_issues

    named = named_integrations(profile)
    if not named:
        return [Finding(profile.name, "integrations", None, "the profile names no tracker or "
                        "registry")]
    problems = integration_issues(profile, environ)
    if problems:
        return [_from_issue(profile.name, i) for i in problems]
    return [Finding(profile.name, "integrations", True, f"{', '.join(named)}: reachable, "
                    "their secrets resolve")]


def _notify_findings(profile: Profile, api_answers: bool) -> list[Finding]:
    """The notification block the profile's ``notify`` names, asked of the Prefect API the
    deployments use, as the deploy step asks it (flows/notifications/apply.py)."""
    section = profile.notify
    if section is None:
        return [Finding(profile.name, "notify.block", None, "the profile sends no messages")]
    if not api_answers:
        return [Finding(profile.name, "notify.block", None, f"{section.block}: not checked "
                        "without a Prefect API that answers (above)")]
    from prefect.client.orchestration import get_client

    from flows.notifications.apply import NotifyRefused, check_block

    try:
        with get_client(sync_client=True) as client:
            check_block(client, section)
    except NotifyRefused as refused:
        problem, _, fix = str(refused).removeprefix("notify.block: ").partition("; fix: ")
        return [Finding(profile.name, "notify.block", False, problem, fix,
                        Failure.CONFIG_NOTIFY_BLOCK)]
    return [Finding(profile.name, "notify.block", True, f"{section.block} exists and can "
                    "notify")]


def named_integrations(profile: Profile) -> list[str]:
    """Pure: the profile's sections that reach a tracker or registry."""
    tracking, rule = profile.tracking, profile.promotion_rule
    register = rule.register if rule is not None else None
    sections = {"tracking.mlflow": tracking.mlflow, "tracking.wandb": tracking.wandb,
                "tracking.tensorboard": tracking.tensorboard,
                "promotion.register.mlflow": register.mlflow if register else None,
                "promotion.register.hub": register.hub if register else None,
                "promotion.register.vertex": register.vertex if register else None}
    return [name for name, section in sections.items() if section is not None]


def check_command(profiles: Sequence[str], sets: Sequence[str],
                  environ: Mapping[str, str] | None = None, import_recipe: bool = False) -> int:
    """Prints the findings, one block per target; the exit code says the worst of them.
    A profile's recipe is imported (in the sandbox) only with ``import_recipe``."""
    from flows.config.loading import parse_override

    env = os.environ if environ is None else environ
    try:
        overrides = dict(parse_override(item) for item in sets)
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    api = prefect_findings(configured_api_url())
    blocks: list[tuple[str, list[Finding]]] = [("machine", machine_findings()), ("prefect", api)]
    api_answers = any(f.what == "API" and f.ok for f in api)
    readable = True
    for name in profiles:
        found, ok = profile_findings(name, overrides, env, api_answers, import_recipe)
        readable = readable and ok
        blocks.append((f"profile {name}", found))
    for title, found in blocks:
        print(f"{title}:")
        print("\n".join(f"  {line}" for f in found for line in f.render().splitlines()))
    missing = sum(f.ok is False for _, found in blocks for f in found)
    print(f"{missing} missing" if missing else "everything checked is present")
    if not profiles:
        print("name profiles to check what each needs as well: tpurl check rehearsal "
              "smoke-qwen3-0.6b-v6e-8 --set gke.project=...")
    return 2 if not readable else (1 if missing else 0)
