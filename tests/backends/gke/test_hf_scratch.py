"""The convert pod's HF download fits its memory-backed scratch, with the hf-xet chunk cache
counted, and the plan shows the arithmetic.

hf-xet keeps a chunk cache under HF_HOME (huggingface_hub: HF_XET_CACHE = HF_HOME/xet) of
HF_XET_CHUNK_CACHE_SIZE_BYTES; its default is 10_000_000_000 in hf_xet builds up to 1.2.0 and
0 from 1.3.0, which builds with the no-default-cache feature (huggingface/xet-core#559;
hf_xet/Cargo.toml, xet_runtime/src/config/groups/chunk_cache.rs). The image's hf_xet is not
known here, so the pod pins it to 0."""

from __future__ import annotations

import pytest

from flows.backends.gke.jobs.render import render_jobset
from flows.config import ProfileError
from flows.operations.plan import build_plan, planned_workloads
from tests.support.profiles import tutorial_profile


def _env(stage: str) -> dict[str, str]:
    profile = tutorial_profile()
    jobset = render_jobset(planned_workloads(profile)[stage], profile, run="r", stage=stage)
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return {e["name"]: e.get("value", "") for e in pod["containers"][0]["env"]}


def test_the_convert_pod_disables_the_xet_chunk_cache_on_its_scratch() -> None:
    env = _env("convert")
    assert env["HF_HOME"] == "/scratch/huggingface"
    assert env["HF_XET_CHUNK_CACHE_SIZE_BYTES"] == "0"


def test_the_plan_shows_the_scratch_arithmetic() -> None:
    [convert] = [p for p in build_plan(tutorial_profile()) if p.stage == "convert"]
    assert ("HF download scratch: 57 GiB safetensors + 0 GiB hf-xet chunk cache "
            "(HF_XET_CHUNK_CACHE_SIZE_BYTES=0; hf_xet up to 1.2 would keep 9.3 GiB) + 4 GiB "
            "margin = 61 GiB <= 64 GiB of gke.conversion_scratch_memory (3 GiB spare)"
            ) in convert.notes


def test_a_scratch_too_small_for_the_download_is_refused_with_the_arithmetic() -> None:
    with pytest.raises(ProfileError) as err:
        tutorial_profile(**{"gke.conversion_scratch_memory": "60Gi"})
    [issue] = [i for i in err.value.issues if i.field == "gke.conversion_scratch_memory"]
    assert "57 GiB safetensors + 0 GiB hf-xet chunk cache" in issue.problem
    assert "= 61 GiB > 60 GiB" in issue.problem
    assert "at least 61Gi" in issue.fix
