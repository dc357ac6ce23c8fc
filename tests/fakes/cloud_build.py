"""A fake Cloud Build API over HTTP, reached by the real google-cloud-build client (REST
transport, ``client_options.api_endpoint``, anonymous credentials), that really builds.

What it does, as the service does for the calls the image stage makes:

- ``POST /v1/{parent=projects/*/locations/*}/builds`` (and the global
  ``/v1/projects/{project_id}/builds``): the paths of the client's REST transport
  (google/cloud/devtools/cloudbuild_v1/services/cloud_build/transports/rest_base.py,
  ``_BaseCreateBuild``). The source object is read from fake-gcs-server first; a missing one
  is refused at once with ``400 INVALID_ARGUMENT could not resolve source: googleapi: Error
  404: No such object: …``, the service's message. Otherwise the answer is an Operation whose
  metadata is a ``BuildOperationMetadata`` holding the Build (status QUEUED, logUrl), and the
  build runs in a thread.
- Each step runs for real against the local dockerd: ``gcr.io/cloud-builders/docker`` is the
  docker CLI (that builder image's entrypoint is ``docker``; it cannot be pulled here), any
  other ``name`` is run as a container with the workspace at ``/workspace`` (how Cloud Build
  runs a step; an image built by an earlier step may be a later step's name). Then
  ``images:`` are pushed and ``results.images[].digest`` filled in.
- Each step gets ``BUILDER_OUTPUT`` (a directory of its own, mounted at /builder/outputs);
  what it writes to ``$BUILDER_OUTPUT/output`` comes back, first 50 KB, base64 as proto3
  JSON encodes bytes, as that step's entry of ``results.buildStepOutputs`` (one per step,
  empty when it wrote nothing: google/devtools/cloudbuild/v1/cloudbuild.proto ``Results``,
  as google-cloud-build 3.43's types/cloudbuild.py documents it).
- A failing step ends the build with status FAILURE, ``statusDetail`` ``Build step N "NAME"
  failed: step exited with non-zero status: RC`` and ``failureInfo.type`` USER_BUILD_STEP; a
  failed push with PUSH_FAILED (google/devtools/cloudbuild/v1/cloudbuild.proto, Build.Status
  and FailureInfo.FailureType).
- ``GET /v1/{name=projects/*/locations/*/operations/*}`` (the operations client's
  GetOperation): ``404 NOT_FOUND Requested entity was not found.`` while the build carries
  on, which is what the service answered the client's poll of a regional build's operation in
  googleapis/google-cloud-python#12123 (closed without a fix; the poll lacks the location
  routing header). ``operations_answer = True`` serves it instead: done with the Build as
  ``response`` on success, or with ``error`` (code 2, "Build failed; check build logs for
  details") when the build did not succeed.
- ``GET /v1/{name=projects/*/locations/*/builds/*}``: the Build (projects.locations.builds.get,
  which answers for regional builds, googleapis/google-cloud-python#11079).
  ``fail_build_reads`` (HTTP codes) answers the next reads with those errors first (503: the
  service's "The service is currently unavailable.", 403: PERMISSION_DENIED), for the poll's
  error handling.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import subprocess
import tarfile
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support.net import free_port, send_json

DOCKER_BUILDER = "gcr.io/cloud-builders/docker"
BUILDER_OUTPUT = "/builder/outputs"  # where a step's $BUILDER_OUTPUT points
OUTPUT_LIMIT = 50 * 1024  # "Only the first 50KB of data is stored"
BUILD_TYPE = "type.googleapis.com/google.devtools.cloudbuild.v1.Build"
METADATA_TYPE = "type.googleapis.com/google.devtools.cloudbuild.v1.BuildOperationMetadata"


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


@dataclass
class FakeBuild:
    body: dict[str, Any]
    operation: str
    log: list[str] = field(default_factory=list)
    finished: threading.Event = field(default_factory=threading.Event)


class FakeCloudBuild:
    def __init__(self, gcs_url: str, docker_host: str) -> None:
        self.gcs_url, self.docker_host = gcs_url, docker_host
        self.builds: dict[str, FakeBuild] = {}
        self.operations: dict[str, str] = {}  # operation name -> build id
        self.requests: list[tuple[str, str]] = []
        self.operations_answer = False  # see the module docstring
        self.fail_build_reads: list[int] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", free_port()), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeCloudBuild:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        for build in list(self.builds.values()):
            build.finished.wait(600)

    # --- the API --------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, code: int, payload: dict[str, Any]) -> None:
                send_json(self, code, payload)

            def do_POST(self) -> None:
                path = urllib.parse.urlparse(self.path).path
                fake.requests.append(("POST", path))
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                match = (re.fullmatch(r"/v1/projects/([^/]+)/locations/([^/]+)/builds", path)
                         or re.fullmatch(r"/v1/projects/([^/]+)/builds", path))
                if not match:
                    return self._send(404, _error(404, "NOT_FOUND", f"no route {path}"))
                location = match.group(2) if match.lastindex == 2 else "global"
                code, payload = fake.create(match.group(1), location, body)
                self._send(code, payload)

            def do_GET(self) -> None:
                path = urllib.parse.urlparse(self.path).path
                fake.requests.append(("GET", path))
                if m := re.fullmatch(r"/v1/(projects/[^/]+/locations/[^/]+/operations/[^/]+)", path):
                    code, payload = fake.operation(m.group(1))
                elif m := re.fullmatch(r"/v1/projects/[^/]+/locations/[^/]+/builds/([^/]+)", path):
                    code, payload = fake.build(m.group(1))
                else:
                    code, payload = 404, _error(404, "NOT_FOUND", f"no route {path}")
                self._send(code, payload)

        return Handler

    def create(self, project: str, location: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        source = (body.get("source") or {}).get("storageSource") or {}
        tarball = self._fetch(source)
        if tarball is None:
            return 400, _error(400, "INVALID_ARGUMENT", (
                f"could not resolve source: googleapi: Error 404: No such object: "
                f"{source.get('bucket')}/{source.get('object')}, notFound"))
        build_id = str(uuid.uuid4())
        operation = f"projects/{project}/locations/{location}/operations/{uuid.uuid4().hex}"
        build = {**body, "id": build_id, "projectId": project, "status": "QUEUED",
                 "name": f"projects/{project}/locations/{location}/builds/{build_id}",
                 "createTime": _now(),
                 "logUrl": (f"https://console.cloud.google.com/cloud-build/builds;region="
                            f"{location}/{build_id}?project={project}")}
        with self._lock:
            self.builds[build_id] = FakeBuild(build, operation)
            self.operations[operation] = build_id
        threading.Thread(target=self._run, args=(build_id, tarball), daemon=True).start()
        return 200, self._operation_json(build_id)

    def operation(self, name: str) -> tuple[int, dict[str, Any]]:
        if name not in self.operations or not self.operations_answer:
            return 404, _error(404, "NOT_FOUND", "Requested entity was not found.")
        return 200, self._operation_json(self.operations[name])

    def build(self, build_id: str) -> tuple[int, dict[str, Any]]:
        with self._lock:
            fault = self.fail_build_reads.pop(0) if self.fail_build_reads else None
        if fault == 503:
            return 503, _error(503, "UNAVAILABLE", "The service is currently unavailable.")
        if fault is not None:
            return fault, _error(fault, "PERMISSION_DENIED", "The caller does not have "
                                 "permission")
        if build_id not in self.builds:
            return 404, _error(404, "NOT_FOUND", "Requested entity was not found.")
        with self._lock:
            return 200, json.loads(json.dumps(self.builds[build_id].body))

    def _operation_json(self, build_id: str) -> dict[str, Any]:
        with self._lock:
            record = self.builds[build_id]
            build = json.loads(json.dumps(record.body))
        out: dict[str, Any] = {"name": record.operation,
                               "metadata": {"@type": METADATA_TYPE, "build": build}}
        if build["status"] == "SUCCESS":
            out.update(done=True, response={"@type": BUILD_TYPE, **build})
        elif build["status"] not in ("QUEUED", "WORKING"):
            out.update(done=True, error={"code": 2, "message": "Build failed; check build logs "
                                                               "for details"})
        return out

    def _fetch(self, source: dict[str, Any]) -> bytes | None:
        name = urllib.parse.quote(str(source.get("object", "")), safe="")
        url = f"{self.gcs_url}/storage/v1/b/{source.get('bucket')}/o/{name}?alt=media"
        if source.get("generation"):
            url += f"&generation={source['generation']}"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    # --- running a build ------------------------------------------------------------------

    def _set(self, build_id: str, **changes: Any) -> None:
        with self._lock:
            self.builds[build_id].body.update(changes)

    def _docker(self, argv: list[str], cwd: Path, record: FakeBuild) -> int:
        env = {**os.environ, "DOCKER_HOST": self.docker_host}
        proc = subprocess.run(["docker", *argv], cwd=cwd, env=env, capture_output=True, text=True)
        record.log += (proc.stdout + proc.stderr).splitlines()
        return proc.returncode

    def _run(self, build_id: str, tarball: bytes) -> None:
        record = self.builds[build_id]
        try:
            with tempfile.TemporaryDirectory(prefix="fake-cloudbuild-") as tmp:
                workspace = Path(tmp) / "workspace"  # beside it: each step's outputs dir
                workspace.mkdir()
                with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
                    tar.extractall(workspace, filter="data")
                self._set(build_id, status="WORKING", startTime=_now())
                self._steps(build_id, record, workspace)
        except Exception as exc:  # a bug here must show as a failed build, not a hang
            record.log.append(f"fake cloud build: {exc!r}")
            self._set(build_id, status="INTERNAL_ERROR", statusDetail=repr(exc), finishTime=_now())
        finally:
            record.finished.set()

    def _steps(self, build_id: str, record: FakeBuild, workspace: Path) -> None:
        steps = record.body.get("steps", [])
        outputs: list[str] = []
        for index, step in enumerate(steps):
            name = step["name"]
            out_dir = workspace.parent / f"outputs-{index}"
            out_dir.mkdir()
            if name == DOCKER_BUILDER:
                argv = list(step.get("args", []))
            else:
                argv = ["run", "--rm", "--network", "none", "-v", f"{workspace}:/workspace",
                        "-v", f"{out_dir}:{BUILDER_OUTPUT}", "-e", f"BUILDER_OUTPUT={BUILDER_OUTPUT}",
                        "-w", f"/workspace/{step.get('dir', '')}".rstrip("/")]
                if step.get("entrypoint"):
                    argv += ["--entrypoint", step["entrypoint"]]
                argv += [name, *step.get("args", [])]
            code = self._docker(argv, workspace / step.get("dir", ""), record)
            written = out_dir / "output"
            outputs.append(base64.b64encode(written.read_bytes()[:OUTPUT_LIMIT]).decode()
                           if written.is_file() else "")
            step["status"] = "SUCCESS" if code == 0 else "FAILURE"
            if code != 0:
                detail = f'Build step {index} "{name}" failed: step exited with non-zero status: {code}'
                self._set(build_id, status="FAILURE", statusDetail=detail, finishTime=_now(),
                          failureInfo={"type": "USER_BUILD_STEP", "detail": detail})
                return
        results = []
        for image in record.body.get("images", []):
            if self._docker(["push", image], workspace, record) != 0:
                detail = f"failed to push {image}"
                self._set(build_id, status="FAILURE", statusDetail=detail, finishTime=_now(),
                          failureInfo={"type": "PUSH_FAILED", "detail": detail})
                return
            results.append({"name": image, "digest": self._digest(image)})
        self._set(build_id, status="SUCCESS", finishTime=_now(),
                  results={"images": results, "buildStepOutputs": outputs})

    def _digest(self, image: str) -> str:
        env = {**os.environ, "DOCKER_HOST": self.docker_host}
        out = subprocess.run(["docker", "inspect", "--format", "{{json .RepoDigests}}", image],
                             env=env, capture_output=True, text=True, check=True).stdout
        repository = image.rsplit(":", 1)[0]
        for entry in json.loads(out):
            if entry.startswith(repository + "@"):
                return str(entry.split("@", 1)[1])
        raise RuntimeError(f"no digest of {image} after the push: {out}")


def _error(code: int, status: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


def cloud_build_client(url: str) -> Any:
    """The real CloudBuildClient on the fake: REST transport, anonymous credentials."""
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.devtools import cloudbuild_v1

    return cloudbuild_v1.CloudBuildClient(credentials=AnonymousCredentials(), transport="rest",
                                          client_options=ClientOptions(api_endpoint=url))
