"""The gcluster and gcloud command lines, as pure functions, and one way to run them.

Why pure argv builders: the exact commands are the contract with the tutorial, so tests assert
them verbatim and ``tpurl plan`` prints the very same lists. Why one runner: every command
runs with stdin closed (gcluster prompts on stdin and dies on EOF; closing it
turns a hidden prompt into an immediate, diagnosable failure instead of a hang), its output
is kept in a log file and its tail lands in the error.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from flows.backends.gke.infra.settings import BLUEPRINT_FILE, InfraSettings
from flows.core.failures import user_error


def blueprint_vars(s: InfraSettings) -> dict[str, str]:
    """The blueprint's required vars, in the tutorial's order; the reservation only in
    reservation mode (the other modes' edits leave no reference to it). Then the machine
    type and the accelerator label of the profile's generation: the example's vars default
    to v6e's (machine_type: ct6e-standard-4t, accelerator_type: tpu-v6e-slice, which its
    Kueue template puts in the TPU flavor's nodeLabels), so without them a v5p or tpu7x
    profile would deploy a v6e pool and a flavor no node of its own matches. For v6e they
    are the example's own values: a cluster deployed without them plans no change."""
    out = {"project_id": s.gke.project, "deployment_name": s.gke.cluster, "region": s.gke.region,
           "zone": s.gke.zone, "num_slices": str(s.gke.num_slices), "tpu_topology": s.gke.topology,
           "authorized_cidr": s.gke.authorized_cidr}
    if s.gke.reservation:
        out["reservation"] = s.gke.reservation
    out["machine_type"] = s.gke.machine_type
    out["accelerator_type"] = s.gke.machine.accelerator_label
    return out


def deploy_argv(s: InfraSettings, gcluster: str = "gcluster") -> list[str]:
    """Create/re-apply: -w keeps the existing folder's Terraform state; never prompts."""
    joined = ",".join(f"{k}={v}" for k, v in blueprint_vars(s).items())
    return [gcluster, "deploy", BLUEPRINT_FILE, "--vars", joined, "--download-dependencies",
            "-l", "IGNORE", "--auto-approve", "-w"]


def destroy_argv(s: InfraSettings, gcluster: str = "gcluster") -> list[str]:
    """Never prompts: --auto-approve answers Terraform's apply question (cmd/destroy.go,
    addAutoApproveFlag) and --download-dependencies the "terraform is missing, download it?
    [y/N]" one, which cluster-toolkit asks before destroy as before deploy (cmd/root.go runs
    initDependencies for deploy, destroy and export-outputs; pkg/dependencies/resolver.go
    reads the answer from stdin, and a closed stdin is a "no")."""
    return [gcluster, "destroy", s.gke.cluster, "--auto-approve", "--download-dependencies"]


def get_credentials_argv(s: InfraSettings) -> list[str]:
    return ["gcloud", "container", "clusters", "get-credentials", s.gke.cluster,
            f"--region={s.gke.region}", f"--project={s.gke.project}"]


def project_binding_argv(project: str, member: str, role: str) -> list[str]:
    return ["gcloud", "projects", "add-iam-policy-binding", project, f"--member={member}",
            f"--role={role}", "--condition=None", "--quiet"]


def bucket_binding_argv(bucket: str, member: str, role: str) -> list[str]:
    return ["gcloud", "storage", "buckets", "add-iam-policy-binding", f"gs://{bucket}",
            f"--member={member}", f"--role={role}"]


def docker_auth_argv(registry: str) -> list[str]:
    return ["gcloud", "auth", "configure-docker", registry, "--quiet"]


def render(argv: list[str]) -> str:
    import shlex

    return shlex.join(argv)


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    tail: tuple[str, ...]
    log: Path | None

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def tail_text(self, lines: int = 25) -> str:
        return "\n".join(f"    {line}" for line in self.tail[-lines:])


def require_executable(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        fixes = {"gcloud": "install the Google Cloud CLI (https://cloud.google.com/sdk/docs/install) "
                           "and run `gcloud auth login` and `gcloud auth application-default login`"}
        raise user_error("infra", f"`{name}` is not on PATH", f"PATH lookup for {name} failed",
                         fixes.get(name, f"install {name} and put it on PATH"))
    return path


def run(argv: list[str], cwd: Path | None = None, log: Path | None = None,
        timeout_s: float | None = None) -> CommandResult:
    """Run with stdin closed; stream output to ``log``; keep the last 200 lines."""
    tail: deque[str] = deque(maxlen=200)
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
    sink = log.open("a") if log is not None else None
    try:
        if sink:
            sink.write(f"$ {render(argv)}\n")
        proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line.rstrip("\n"))
            if sink:
                sink.write(line)
        code = proc.wait(timeout=timeout_s)
    finally:
        if sink:
            sink.close()
    return CommandResult(tuple(argv), code, tuple(tail), log)
