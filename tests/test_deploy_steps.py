"""The flow image's tag is computed from what the build sees, and bad settings stop
`prefect deploy` before anything is built (flows/deploy_steps.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from flows import deploy_steps
from flows.common.paths import REPO_ROOT
from flows.deploy_steps import FlowImageError, flow_image_tag

DOCKERFILE = "images/flow/Dockerfile"


@pytest.fixture
def context(tmp_path: Path) -> Path:
    """A small build context laid out like the repository's."""
    (tmp_path / "images" / "flow").mkdir(parents=True)
    shutil.copy(REPO_ROOT / DOCKERFILE, tmp_path / DOCKERFILE)
    shutil.copy(REPO_ROOT / ".dockerignore", tmp_path / ".dockerignore")
    for name in ("pyproject.toml", "README.md", "prefect.yaml", "images/flow/install_cloud_tools.py",
                 "images/flow/requirements.lock",
                 "flows/__init__.py", "flows/pipeline.py", "deployments/profiles/x.yaml",
                 "tests/test_x.py", "docs/index.md", ".gitignore", ".venv/lib/site.py",
                 "flows/__pycache__/pipeline.cpython-312.pyc"):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {name}\n")
    return tmp_path


def _tag(context: Path, **kwargs: str) -> str:
    return flow_image_tag("127.0.0.1:5000/tpurl-flow", context=str(context), **kwargs)["tag"]


def test_the_dockerfile_copies_what_the_image_needs():
    sources = deploy_steps.copy_sources((REPO_ROOT / DOCKERFILE).read_text())
    assert {"pyproject.toml", ".", "images/flow/install_cloud_tools.py",
            "deployments/cluster-toolkit.sha256", "images/flow/requirements.lock"} == set(sources)


def test_same_content_same_tag_and_the_step_returns_the_build_inputs(context: Path):
    out = flow_image_tag("127.0.0.1:5000/tpurl-flow", context=str(context))
    assert out["tag"] == _tag(context) and out["tag"].startswith("c-")
    assert out["image"] == f"127.0.0.1:5000/tpurl-flow:{out['tag']}"
    assert out["buildargs"] == {"PYTHON_IMAGE": "python:3.12-slim-bookworm", "CLOUD_TOOLS": "1"}


@pytest.mark.parametrize("changed", ["flows/pipeline.py", "deployments/profiles/x.yaml",
                                     "images/flow/requirements.lock",
                                     "README.md", DOCKERFILE, "flows/new_module.py", ".gitignore"])
def test_a_copied_file_or_the_dockerfile_changes_the_tag(context: Path, changed: str):
    before = _tag(context)
    (context / changed).write_text((context / changed).read_text() + "# edit\n"
                                   if (context / changed).exists() else "x = 1\n")
    assert _tag(context) != before


@pytest.mark.parametrize("changed", ["tests/test_x.py", "docs/index.md", ".venv/lib/site.py",
                                     "flows/__pycache__/pipeline.cpython-312.pyc",
                                     ".coverage", ".coverage.vm.pid4242.Xab12.Hcd34",
                                     "coverage.xml", "htmlcov/index.html",
                                     ".mypy_cache/3.12/flows/pipeline.data.json",
                                     ".hypothesis/examples/0a1b/2c3d"])
def test_dockerignored_files_leave_the_tag(context: Path, changed: str):
    """Among them what a test run or a type check writes while `prefect deploy --all` runs
    (coverage data of a pytest run ending beside it once made the deploy build twice)."""
    before = _tag(context)
    (context / changed).parent.mkdir(parents=True, exist_ok=True)
    (context / changed).write_text("changed\n")
    assert _tag(context) == before


def test_the_base_image_and_cloud_tools_are_part_of_the_tag(context: Path):
    tags = {_tag(context), _tag(context, base_image="python:3.12-slim-bookworm@sha256:" + "a" * 64),
            _tag(context, cloud_tools="0")}
    assert len(tags) == 3


@pytest.mark.parametrize(("value", "says"), [
    ("", "TPURL_FLOW_IMAGE is not set"),
    ("  ", "TPURL_FLOW_IMAGE is not set"),
    ("127.0.0.1:5000/tpurl-flow:0.1.0", "holds a tag or digest"),
    ("r.example/tpurl-flow@sha256:" + "0" * 64, "holds a tag or digest"),
    ("Has Spaces/flow", "not an image repository")])
def test_a_missing_or_bad_image_repository_names_the_variable_and_the_fix(value: str, says: str):
    with pytest.raises(FlowImageError) as caught:
        deploy_steps.check_repository(value)
    assert says in str(caught.value)
    assert "fix: export TPURL_FLOW_IMAGE=" in str(caught.value)


def test_a_registry_port_is_not_a_tag():
    assert deploy_steps.check_repository("127.0.0.1:5000/ns/tpurl-flow") == "127.0.0.1:5000/ns/tpurl-flow"


def test_cloud_tools_must_be_0_or_1():
    with pytest.raises(FlowImageError, match="TPURL_FLOW_CLOUD_TOOLS=yes must be 0 or 1"):
        deploy_steps.build_args("", "yes")


def test_by_digest_refuses_what_is_not_a_digest():
    assert deploy_steps.by_digest("r/x", "sha256:" + "b" * 64) == "r/x@sha256:" + "b" * 64
    with pytest.raises(FlowImageError):
        deploy_steps.by_digest("r/x", "latest")


SHIPPED_TEMPLATE = REPO_ROOT / "deployments/work-pool/kubernetes-base-job-template.json"
PINNED = "127.0.0.1:5000/tpurl-flow@sha256:" + "c" * 64


def _flow_container(template: dict) -> dict:
    return template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"][
        "containers"][0]


def _with_an_image_variable(template: dict) -> dict:
    """The template shape Prefect ships: the container renders a run's ``image`` variable."""
    shaped = json.loads(json.dumps(template))
    _flow_container(shaped)["image"] = "{{ image }}"
    shaped["variables"]["properties"]["image"] = {"type": "string"}
    shaped["variables"]["required"] = ["image"]
    return shaped


def test_pinning_fixes_the_flow_containers_image_and_changes_nothing_else():
    shipped = json.loads(SHIPPED_TEMPLATE.read_text())
    pinned = deploy_steps.pinned_template(shipped, PINNED)
    assert _flow_container(pinned)["image"] == PINNED
    _flow_container(pinned)["image"] = _flow_container(shipped)["image"]
    assert pinned == shipped
    assert deploy_steps.pinned_template(deploy_steps.pinned_template(shipped, PINNED),
                                        "r/x@sha256:" + "d" * 64) == deploy_steps.pinned_template(
        shipped, "r/x@sha256:" + "d" * 64)  # a later deploy replaces the earlier digest


def test_pinning_a_template_with_an_image_variable_removes_the_variable_only():
    shipped = json.loads(SHIPPED_TEMPLATE.read_text())
    pinned = deploy_steps.pinned_template(_with_an_image_variable(shipped), PINNED)
    assert "image" not in pinned["variables"]["properties"]
    assert pinned["variables"]["required"] == []
    del pinned["variables"]["required"]
    assert pinned == deploy_steps.pinned_template(shipped, PINNED)


def test_a_template_rendering_the_image_elsewhere_or_without_the_flow_container_is_refused():
    shipped = json.loads(SHIPPED_TEMPLATE.read_text())
    sidecar = json.loads(json.dumps(shipped))
    sidecar["job_configuration"]["job_manifest"]["spec"]["template"]["spec"][
        "containers"].append({"name": "sidecar", "image": "{{ image }}"})
    with pytest.raises(FlowImageError, match=r"outside the 'prefect-job' container.*fix: "):
        deploy_steps.pinned_template(sidecar, PINNED)
    _flow_container(shipped)["name"] = "renamed"
    with pytest.raises(FlowImageError, match=r"no container named 'prefect-job'.*fix: "):
        deploy_steps.pinned_template(shipped, PINNED)


@pytest.mark.parametrize(("repository", "image", "says"), [
    ("", PINNED, "TPURL_FLOW_IMAGE is not set"),
    ("127.0.0.1:5000/tpurl-flow", "127.0.0.1:5000/tpurl-flow:c-0123", "by sha256 digest"),
    ("127.0.0.1:5000/tpurl-flow", "docker.io/attacker/evil@sha256:" + "c" * 64,
     "by sha256 digest"),
    ("127.0.0.1:5000/tpurl-flow", "", "by sha256 digest")])
def test_only_the_flow_repository_by_digest_is_pinned(repository: str, image: str, says: str):
    with pytest.raises(FlowImageError, match=says) as caught:
        deploy_steps.check_pinnable(repository, image)
    assert "fix: " in str(caught.value)
    assert deploy_steps.check_pinnable("127.0.0.1:5000/tpurl-flow", PINNED) == PINNED
