"""Benchmark: the flow image — its size, its build cold / cached / after a code change, and
the time from `prefect deploy --all` to a flow run starting in a container of it.

On Debian's dockerd (vfs storage: every layer is a full copy) and registry
(scripts/docker-services.sh), FROM the Debian-packages base (scripts/debian-base-image.sh),
CLOUD_TOOLS=0, with prefect-docker's own build step (flows/deploy_steps.py computes the tag):

    base cold   = debootstrap + docker import + push (TPURL_BASE_REBUILD=1)
    base warm   = the script again (the image is present: returns at once)
    build cold  = build_docker_image with nocache (pip installs every dependency from PyPI)
    build warm  = the same build again (every layer cached)
    build code  = a context with one changed file under flows/ (the code layers only)
    deploy→run  = a fresh `prefect server start`: pools, `prefect deploy --all` (cache warm),
                  a run of the weekly Kubernetes deployment whose pod (rendered by
                  prefect-kubernetes, tests/support/kube_pod.py) is started with dockerd;
                  measured to the run's start_time as the API records it.

Exits 1 when the build after a code change gave the cached build's image (the change did
not reach it). ``--quick`` (the tests' run, in the flow-image test, whose dockerd holds the
base and the built layers) measures base warm, build warm and build code only: no base
rebuild, no build without cache, no deploy→run (the deployment tests run that path).
Usage: .venv/bin/python benchmarks/flow_image.py [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flows.common.paths import REPO_ROOT
from flows.deploy_steps import DEFAULT_DOCKERFILE, context_files, flow_image_tag
from tests.fakes.adc_key import write_adc_key
from tests.support.flow_image import BASE_SCRIPT, deploy_env
from tests.support.prefect_server import PREFECT, prefect_server_in

REGISTRY = os.environ.get("TPURL_REGISTRY_ADDR", "127.0.0.1:5000")


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    started = time.monotonic()
    value = fn(*args, **kwargs)
    return time.monotonic() - started, value


def base_image(rebuild: bool) -> str:
    env = {**os.environ, "TPURL_BASE_REBUILD": "1" if rebuild else "0"}
    out = subprocess.run(["bash", str(BASE_SCRIPT), f"{REGISTRY}/tpurl-debian-base"], env=env,
                         check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def build(repository: str, base: str, context: Path, nocache: bool) -> dict:
    from prefect_docker.deployments.steps import build_docker_image

    step = flow_image_tag(repository, base_image=base, cloud_tools="0", context=str(context))
    with contextlib.redirect_stdout(io.StringIO()):  # the build's own log
        return build_docker_image(image_name=step["image_name"], tag=step["tag"],
                                  dockerfile=DEFAULT_DOCKERFILE, buildargs=step["buildargs"],
                                  network_mode="host", path=str(context), nocache=nocache,
                                  ignore_cache=True)


def changed_context(into: Path) -> Path:
    for name in context_files(REPO_ROOT, DEFAULT_DOCKERFILE):
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, into / name)
    (into / "flows" / "_benchmark_edit.py").write_text(f"EDIT = {uuid.uuid4().hex!r}\n")
    return into


def deploy_to_run(repository: str, base: str, home: Path) -> tuple[float, float]:
    """(deploy seconds, deploy start -> flow run start seconds)."""
    home.mkdir(parents=True, exist_ok=True)
    with prefect_server_in(home) as server:
        env = deploy_env(server.env, repository, base)
        template = REPO_ROOT / "deployments" / "work-pool" / "kubernetes-base-job-template.json"
        for args in (["work-pool", "create", "tpurl-process", "--type", "process"],
                     ["work-pool", "create", "tpurl-kubernetes", "--type", "kubernetes",
                      "--base-job-template", str(template)],):
            subprocess.run([PREFECT, *args], env=env, cwd=REPO_ROOT, check=True, capture_output=True)
        adc = write_adc_key(home / "adc.json")
        subprocess.run([sys.executable, "-m", "flows.cli", "result-storage", "qwen3-30b-a3b-v6e-32",
                        *[a for kv in ("gke.project=my-proj", "gke.region=us-east5",
                                       "gke.zone=us-east5-b", "gke.cluster=tpurl-v6e",
                                       "gke.bucket=my-proj-tpurl", "gke.reservation=my-v6e-res",
                                       "gke.authorized_cidr=203.0.113.7/32") for a in ("--set", kv)]],
                       env={**env, "GOOGLE_APPLICATION_CREDENTIALS": str(adc)}, cwd=REPO_ROOT,
                       check=True, capture_output=True)
        started_wall, started = time.time(), time.monotonic()
        subprocess.run([PREFECT, "--no-prompt", "deploy", "--all"], env=env, cwd=REPO_ROOT,
                       check=True, capture_output=True)
        deploy_s = time.monotonic() - started
        found = server.api("POST", "/deployments/filter", json={}).json()
        weekly = next(d for d in found if d["name"] == "qwen3-30b-a3b-v6e-32-weekly")
        run = server.api("POST", f"/deployments/{weekly['id']}/create_flow_run", json={}).json()
        pod = json.loads(subprocess.run(
            [sys.executable, "-m", "tests.support.kube_pod", "tpurl-kubernetes", weekly["id"],
             run["id"]], env=server.env, cwd=REPO_ROOT, check=True, capture_output=True,
            text=True).stdout)
        import docker

        client = docker.from_env()
        container = client.containers.run(pod["image"], command=pod["args"], network_mode="host",
                                           environment={**pod["env"], "PREFECT_API_URL": server.url,
                                                        "GOOGLE_APPLICATION_CREDENTIALS": "/adc.json"},
                                           volumes={str(adc): {"bind": "/adc.json", "mode": "ro"}},
                                           detach=True)
        try:
            container.wait(timeout=600)
        finally:
            container.remove(force=True)
        start_time = server.api("GET", f"/flow_runs/{run['id']}").json()["start_time"]
        if start_time is None:
            raise SystemExit("the flow run never started in its container")
        return deploy_s, datetime.fromisoformat(start_time).timestamp() - started_wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="the cached and code-change builds only (the tests' run)")
    quick = parser.parse_args().quick
    script = REPO_ROOT / "scripts" / "docker-services.sh"
    out = subprocess.run(["bash", str(script), "start"], check=True, capture_output=True, text=True)
    os.environ["DOCKER_HOST"] = out.stdout.strip().removeprefix("export DOCKER_HOST=")
    repository = f"{REGISTRY}/tpurl-bench-{uuid.uuid4().hex[:8]}/tpurl-flow"
    base_cold = float("nan")
    if not quick:
        base_cold, base = timed(base_image, True)
    base_warm, base = timed(base_image, False)
    print(f"base image (Debian packages): cold {base_cold:.1f} s, present {base_warm:.1f} s", flush=True)
    cold = float("nan")
    if not quick:
        cold, _ = timed(build, repository, base, REPO_ROOT, True)
    warm, built = timed(build, repository, base, REPO_ROOT, False)
    import docker

    size = docker.from_env().images.get(built["image"]).attrs["Size"]
    print(f"flow image size: {size / 1e6:.0f} MB ({built['image']})", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        code, changed = timed(build, repository, base, changed_context(Path(tmp) / "ctx"), False)
        print(f"flow image build: cold {cold:.1f} s, cached {warm:.1f} s, "
              f"after a flows/ change {code:.1f} s", flush=True)
        if not quick:
            deploy_s, to_run = deploy_to_run(repository, base, Path(tmp) / "prefect-home")
            print(f"prefect deploy --all (cache warm, push, 5 deployments): {deploy_s:.1f} s")
            print(f"prefect deploy --all start -> flow run started in a container: {to_run:.1f} s")
    different = changed["image_id"] != built["image_id"]
    if quick:  # the tests' disk: the two tags this run made go (an image another name holds,
        client = docker.from_env()  # as the cached build shares the deployed one, is untagged)
        for image in {built["image"], changed["image"]}:
            try:
                client.images.remove(image)
            except docker.errors.APIError as exc:  # a disk concern only: the figures stand
                print(f"(the image {image} was kept: {exc})")
    if not different:
        print("the build after a flows/ change gave the cached build's image")
    return 0 if different else 1

if __name__ == "__main__":
    raise SystemExit(main())
