"""`tpurl check`: every missing prerequisite is a FAIL line with its code and fix, never a
traceback, and the exit code says the worst (0 present, 1 missing, 2 unreadable profile).
The CLI runs for real in a subprocess whose PATH, environment and importable packages are
those of a machine missing each thing."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from flows.deploy_steps import pinned_template
from flows.operations.check import POOLS, WORK_POOL_TEMPLATES, Finding, prefect_findings
from tests.support.profiles import TUTORIAL_REQUIRED

SMOKE = "smoke-qwen3-0.6b-v6e-8"
FIELDS = [part for field, value in TUTORIAL_REQUIRED.items() if field != "gke.reservation"
          for part in ("--set", f"{field}={value}")]
DIGEST = "us-docker.pkg.dev/p/r/tpurl-flow@sha256:" + "a" * 64


def _check(tmp_path: Path, *argv: str, path: str = "", hide: tuple[str, ...] = (),
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`tpurl check ARGV` with PATH ``path`` (the venv's bin only by default), no Google
    credentials, and the top-level modules ``hide`` not importable."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("TPURL_", "PREFECT_API", "GOOGLE_", "CLOUDSDK", "DOCKER_"))
             and k not in ("HF_TOKEN", "KUBERNETES_SERVICE_HOST")}
    clean |= {"PATH": path or str(Path(sys.executable).parent), "HOME": str(tmp_path),
              "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock", **(env or {})}
    code = (f"import sys\nfor name in {hide!r}: sys.modules[name] = None\n"
            "from flows.cli import main\nraise SystemExit(main(sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", code, "check", *argv], env=clean,
                          capture_output=True, text=True, timeout=300)


def test_a_machine_without_the_cloud_tools_gets_each_fix_and_exit_1(tmp_path: Path) -> None:
    done = _check(tmp_path, SMOKE, *FIELDS)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout
    out = done.stdout
    for code in ("environment/no-gcloud", "environment/no-google-credentials",
                 "config/secret-unavailable", "infra/bundle-unverified"):
        assert f"[{code}]" in out, (code, out)
    assert "FAIL gke-gcloud-auth-plugin" in out and "gcloud components install" in out
    assert "ok   profile: valid (backend gke)" in out
    # every FAIL line has its fix on the next line
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().startswith("FAIL"):
            assert lines[i + 1].lstrip().startswith("fix: "), line


def test_the_token_set_is_found_and_never_printed(tmp_path: Path) -> None:
    token = "hf_" + "Q" * 34
    done = _check(tmp_path, SMOKE, *FIELDS, env={"HF_TOKEN": token})
    assert "ok   model.hf_token: env:HF_TOKEN resolves here" in done.stdout, done.stdout
    assert token not in done.stdout + done.stderr


def test_without_the_cloud_libraries_the_gke_profile_names_the_setup(tmp_path: Path) -> None:
    done = _check(tmp_path, SMOKE, *FIELDS, hide=("kubernetes",))
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "[environment/no-gke-libraries]" in done.stdout
    assert "bash scripts/setup.sh --gke" in done.stdout
    assert "--   gcp libraries: not installed (kubernetes)" in done.stdout
    assert "Traceback" not in done.stderr + done.stdout


def test_a_profile_that_cannot_be_read_exits_2_naming_its_fields(tmp_path: Path) -> None:
    done = _check(tmp_path, SMOKE)  # the six fields a user fills in are empty
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "FAIL gke.project [config/missing]" in done.stdout, done.stdout
    done = _check(tmp_path, "no-such-profile")
    assert done.returncode == 2 and "[config/not-found]" in done.stdout, done.stdout


def test_the_rehearsal_needs_its_two_interpreters(tmp_path: Path) -> None:
    """Venvs not made yet (the checkout's may exist: other tests build them) need their
    Python; made ones need nothing more."""
    fresh = ["--set", f"local.venv={tmp_path / 'venvs' / 'rehearsal'}",
             "--set", f"local.hf_check_venv={tmp_path / 'venvs' / 'hf-check'}"]
    bare = _check(tmp_path, "rehearsal", *fresh)  # PATH: the venv's bin alone, no python3.11
    assert bare.returncode == 1, (bare.stdout, bare.stderr)
    assert "FAIL export check venv" in bare.stdout and "local.hf_check_python" in bare.stdout
    full = _check(tmp_path, "rehearsal", *fresh, path=os.environ["PATH"])
    assert "ok   rehearsal venv: Python 3.12 found" in full.stdout, full.stdout
    assert "ok   export check venv: Python 3.11 found" in full.stdout, full.stdout
    made = tmp_path / "venvs" / "hf-check" / "bin"
    made.mkdir(parents=True)
    (made / "python").symlink_to(sys.executable)
    done = _check(tmp_path, "rehearsal", *fresh)
    assert f"ok   export check venv: {made.parent} exists" in done.stdout, done.stdout


def test_no_profile_checks_the_machine_and_the_api_only(tmp_path: Path) -> None:
    done = _check(tmp_path, env={"PREFECT_API_URL": "http://127.0.0.1:9/api"})
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "FAIL API: http://127.0.0.1:9/api does not answer" in done.stdout
    assert "profile" not in done.stdout.split("name profiles")[0].split("prefect:")[1]


@pytest.mark.usefixtures("prefect_api")
def test_work_pools_are_checked_against_the_shipped_templates() -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate, WorkPoolUpdate
    from prefect.exceptions import ObjectNotFound
    from prefect.settings import PREFECT_API_URL

    url = str(PREFECT_API_URL.value())
    kinds = {pool: "kubernetes" if "kubernetes" in pool else "process" for pool in POOLS}
    assert {"tpurl-process", "tpurl-kubernetes", "tpurl-kubernetes-tutorial"} <= set(kinds)

    def pools() -> dict[str, str]:
        return {f.what.removeprefix("work pool "): ("ok" if f.ok else "FAIL" if f.ok is False
                                                    else "--")
                for f in prefect_findings(url) if f.what.startswith("work pool")}

    with get_client(sync_client=True) as client:
        for pool in kinds:  # another test of the session's API may have made them
            with contextlib.suppress(ObjectNotFound):
                client.delete_work_pool(pool)
        assert pools() == dict.fromkeys(kinds, "--")  # none yet
        for pool, kind in kinds.items():  # Prefect's default templates: a run sets the command
            client.create_work_pool(WorkPoolCreate(name=pool, type=kind))
        assert pools() == dict.fromkeys(kinds, "FAIL")
        for pool, template_file in POOLS.items():
            shipped = json.loads((WORK_POOL_TEMPLATES / template_file).read_text())
            if kinds[pool] == "kubernetes":  # as `prefect deploy` leaves it: the image pinned
                shipped = pinned_template(shipped, DIGEST)
            client.update_work_pool(pool, WorkPoolUpdate(base_job_template=shipped))
        assert pools() == dict.fromkeys(kinds, "ok")
        tampered = pinned_template(json.loads(
            (WORK_POOL_TEMPLATES / POOLS["tpurl-kubernetes"]).read_text()), DIGEST)
        tampered["variables"]["properties"]["namespace"] = {"type": "string"}
        client.update_work_pool("tpurl-kubernetes", WorkPoolUpdate(base_job_template=tampered))
        assert pools()["tpurl-kubernetes"] == "FAIL"
        for pool in kinds:
            client.delete_work_pool(pool)


@pytest.mark.usefixtures("prefect_api")
def test_the_notification_block_a_profile_names_is_asked_of_the_api() -> None:
    """As the deploy step asks it (flows/notifications/apply.py): missing, then created."""
    from prefect.blocks.notifications import SlackWebhook

    from flows.operations.check import profile_findings

    name = f"tpurl-check-{uuid.uuid4().hex[:8]}"
    overrides = {"notify.block": f"slack-webhook/{name}"}

    def notify(api_answers: bool = True) -> Finding:
        found, readable = profile_findings("rehearsal", overrides, {}, api_answers)
        assert readable
        [finding] = [f for f in found if f.what == "notify.block"]
        return finding

    assert notify(api_answers=False).ok is None  # no API: not checked, not failed
    missing = notify()
    assert (missing.ok, missing.code) == (False, "config/notify-block"), missing
    assert "prefect block create slack-webhook" in missing.fix
    SlackWebhook(url="http://127.0.0.1:9/hook").save(name)  # type: ignore[arg-type]
    assert notify().ok is True
