"""The dispatcher's record of a run it queued vouches for that run, deployment and
announcement parameter only, sealed under the workers' key (pure, and the key's own file;
the check against a real API is test_direct_runs.py and test_team_bounds.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from flows.announcements.model import AnnouncementError
from flows.announcements.record import digest, matches, record_key, record_rows
from flows.announcements.seal import (
    KEY_ENV,
    KEY_FILE,
    MIN_KEY_CHARS,
    SECRET_NAME_ENV,
    dispatch_key,
    pool_key_secret,
    seal,
)

ANNOUNCEMENT = {"serves": {"dataset": {"kind": "dataset", "value": "gs://b/d/v2.parquet",
                                       "event_id": "e-1", "occurred": "2026-01-01T00:00:00"}},
                "coalesced": []}
KEY = b"k" * MIN_KEY_CHARS


def test_the_digest_does_not_depend_on_key_order():
    reordered = {"coalesced": [], "serves": {"dataset": dict(reversed(
        ANNOUNCEMENT["serves"]["dataset"].items()))}}
    assert digest(reordered) == digest(ANNOUNCEMENT)


def test_a_record_vouches_for_its_own_run_deployment_and_parameter_only():
    rows = record_rows(KEY, "run-1", "dep-1", ANNOUNCEMENT)
    assert matches(rows, KEY, "run-1", "dep-1", ANNOUNCEMENT)
    assert not matches(rows, KEY, "run-2", "dep-1", ANNOUNCEMENT)  # a copy on another run
    assert not matches(rows, KEY, "run-1", "dep-2", ANNOUNCEMENT)
    other = {**ANNOUNCEMENT, "coalesced": [ANNOUNCEMENT["serves"]["dataset"]]}
    assert not matches(rows, KEY, "run-1", "dep-1", other)
    assert not matches("not a table", KEY, "run-1", "dep-1", ANNOUNCEMENT)
    assert record_key("3f2a") == "tpurl-queued-3f2a"
    # ids, a digest and the seal: no announced value
    assert set(rows[0]) == {"run", "deployment", "announcement_sha256", "seal"}


def test_only_the_key_that_sealed_a_record_vouches_for_it():
    rows = record_rows(KEY, "run-1", "dep-1", ANNOUNCEMENT)
    assert not matches(rows, b"o" * MIN_KEY_CHARS, "run-1", "dep-1", ANNOUNCEMENT)
    unsealed = [{k: v for k, v in rows[0].items() if k != "seal"}]
    assert not matches(unsealed, KEY, "run-1", "dep-1", ANNOUNCEMENT)
    # a seal moved onto another run's row is that other run's no more
    moved = [{**record_rows(KEY, "run-2", "dep-1", ANNOUNCEMENT)[0], "seal": rows[0]["seal"]}]
    assert not matches(moved, KEY, "run-2", "dep-1", ANNOUNCEMENT)
    assert not matches([{**rows[0], "seal": 7}], KEY, "run-1", "dep-1", ANNOUNCEMENT)
    # the fields are joined unambiguously: shifting text between them changes the seal
    assert seal(KEY, "a", "b\nc", "d") != seal(KEY, "a\nb", "c", "d")


def test_the_key_comes_from_the_environment_or_one_file_per_user(tmp_path: Path):
    given = "x" * MIN_KEY_CHARS
    assert dispatch_key({KEY_ENV: given, "TPURL_CACHE_DIR": str(tmp_path)}) == given.encode()
    assert not (tmp_path / KEY_FILE).exists()
    with pytest.raises(AnnouncementError, match=f"{KEY_ENV}: shorter than {MIN_KEY_CHARS}"):
        dispatch_key({KEY_ENV: given[1:]})
    env = {"TPURL_CACHE_DIR": str(tmp_path / "cache")}
    made = dispatch_key(env)
    assert len(made) >= MIN_KEY_CHARS and dispatch_key(env) == made  # made once, then read
    path = tmp_path / "cache" / KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert list(path.parent.iterdir()) == [path]  # no draft left behind


def test_a_key_file_others_may_read_is_refused_and_the_fix_works(tmp_path: Path):
    env = {"TPURL_CACHE_DIR": str(tmp_path)}
    made = dispatch_key(env)
    path = tmp_path / KEY_FILE
    os.chmod(path, 0o640)
    with pytest.raises(AnnouncementError, match="not this user's alone") as refused:
        dispatch_key(env)
    assert f"`chmod 600 {path}`" in str(refused.value)
    os.chmod(path, 0o600)  # the fix, as written
    assert dispatch_key(env) == made
    path.write_text("short")
    with pytest.raises(AnnouncementError, match="fewer than"):
        dispatch_key(env)
    path.unlink()  # the other fix: a new key is made
    assert dispatch_key(env) != made


def test_the_key_files_place_is_private_and_no_link_chooses_the_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The cache directory is made, with its parents, for this user alone; a key of exactly
    the minimum length is one and one character fewer is not; a key file that is a link is
    refused (its fix, followed, makes a new key), and a draft name someone linked elsewhere
    is never written through."""
    from flows.announcements import seal as sealing

    env = {"TPURL_CACHE_DIR": str(tmp_path / "a" / "b")}
    made = dispatch_key(env)
    assert stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode) == 0o700
    path = tmp_path / "a" / "b" / KEY_FILE
    path.write_text("k" * MIN_KEY_CHARS)
    assert dispatch_key(env) == b"k" * MIN_KEY_CHARS
    path.write_text("k" * (MIN_KEY_CHARS - 1))
    with pytest.raises(AnnouncementError, match="fewer than"):
        dispatch_key(env)
    planted = tmp_path / "planted"
    planted.write_text("p" * 64)
    os.chmod(planted, 0o600)
    path.unlink()
    path.symlink_to(planted)
    with pytest.raises(AnnouncementError, match="symbolic link is refused") as refused:
        dispatch_key(env)
    assert "fix: remove it" in str(refused.value)
    path.unlink()  # the fix, as written
    assert dispatch_key(env) not in (made, b"p" * 64)
    path.unlink()
    monkeypatch.setattr(sealing.secrets, "token_hex", lambda n=32: "0" * (2 * n))
    draft = path.with_name(f".{KEY_FILE}.{os.getpid()}.{'0' * 8}")
    draft.symlink_to(planted)
    with pytest.raises(FileExistsError):
        dispatch_key(env)
    assert planted.read_text() == "p" * 64 and not path.exists()
    monkeypatch.setenv(KEY_ENV, "e" * MIN_KEY_CHARS)  # no mapping given: the process's own
    assert dispatch_key() == b"e" * MIN_KEY_CHARS


def test_a_kubernetes_pod_takes_the_key_from_the_pools_secret_only(tmp_path: Path):
    """A pod's files die with it, so a pod without the Secret's variable is refused, naming
    the Secret the shipped template maps (with it, the key is the Secret's)."""
    import json

    from flows.common.paths import REPO_ROOT

    pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "TPURL_CACHE_DIR": str(tmp_path)}
    with pytest.raises(AnnouncementError, match="kubectl create secret generic "
                                                "tpurl-dispatch-key") as refused:
        dispatch_key(pod)
    assert KEY_ENV in str(refused.value) and not list(tmp_path.iterdir())
    template = json.loads((REPO_ROOT / "deployments/work-pool/"
                           "kubernetes-base-job-template.json").read_text())
    [container] = template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"][
        "containers"]
    [mapped] = [e for e in container["env"] if e["name"] == KEY_ENV]
    assert mapped["valueFrom"]["secretKeyRef"]["name"] == "tpurl-dispatch-key"
    assert dispatch_key({**pod, KEY_ENV: "s" * MIN_KEY_CHARS}) == b"s" * MIN_KEY_CHARS


def test_a_teams_pod_without_the_key_is_told_its_own_pools_secret(tmp_path: Path):
    """A team's pool maps its own Secret to the key (flows/backends/gke/flow_pools.py), so
    team B's flow never holds the key that seals team A's records; a pod of team A's pool
    without it is told to create team A's Secret, which its template then maps."""
    import json

    from flows.backends.gke import flow_pools

    base = json.loads(flow_pools.BASE_TEMPLATE.read_text())
    for team in ("team-a", "team-b"):
        [container] = flow_pools.team_template(base, team)["job_configuration"][
            "job_manifest"]["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e for e in container["env"]}
        secret = env[KEY_ENV]["valueFrom"]["secretKeyRef"]["name"]
        assert secret == f"tpurl-team-{team}-dispatch-key"
        pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "TPURL_CACHE_DIR": str(tmp_path),
               SECRET_NAME_ENV: env[SECRET_NAME_ENV]["value"]}
        with pytest.raises(AnnouncementError) as refused:
            dispatch_key(pod)
        assert (f"fix: `kubectl create secret generic {secret} --from-literal=value=$(openssl "
                "rand -hex 32)` in the pool's namespace, once (the pool's template maps it to "
                "every flow pod)") in str(refused.value)
    assert pool_key_secret(None) == "tpurl-dispatch-key"  # the shared pool's, as it maps


def test_the_docs_key_command_makes_a_key_the_workers_accept(tmp_path: Path):
    """how-to/announce.md's worker block: its `export` line as written (the worker it then
    starts is the deploy page's, run by tests/test_deploy_server.py)."""
    import subprocess

    from tests.support.readme import blocks

    [export] = [line for line in blocks("how-to/announce.md")["dispatch-key-worker"].splitlines()
                if line.startswith(f"export {KEY_ENV}=")]
    made = subprocess.run(["bash", "-euc", f"{export.split('#')[0]}\necho \"${KEY_ENV}\""],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert dispatch_key({KEY_ENV: made, "TPURL_CACHE_DIR": str(tmp_path)}) == made.encode()
