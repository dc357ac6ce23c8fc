"""The flow's result (every artifact URI, per-stage status and timing, chip-hours, metrics)
and where it is kept: beside the outputs, in the profile's bucket (or directory).

Defined in an importable module (not the flow file's ``__main__``) so a persisted result
reads back as this type, not as a dict. Two records, for two readers:
- our own ``tpurl-results/<profile>/<run>.json`` (+ ``latest.json``) written through the same
  Storage as the outputs, so any worker, a notebook or `gcloud storage cat` finds the last
  result of a profile without the Prefect database;
- Prefect's persisted flow result, which on GCP goes to a prefect-gcp ``GcsBucket`` block in
  the same bucket (``ensure_gcs_result_storage``), named in the work pool's environment as
  PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK=gcs-bucket/<name>.
"""

from __future__ import annotations

import threading
from typing import Any

from pydantic import BaseModel, Field

from flows.common.paths import path_part
from flows.config.gke_section import gke_section
from flows.config.profile import Profile
from flows.core.layout import RESULTS_DIR, Layout
from flows.core.stage import StageOutput, WorkloadRun
from flows.core.storage import Storage, join

RESULT_BLOCK = "tpurl-results"
RESULT_FOLDER = "tpurl/prefect-results"


class StageReport(BaseModel):
    stage: str
    status: str
    duration_s: float
    chip_hours: float
    uris: dict[str, str]
    workloads: list[WorkloadRun] = Field(default_factory=list)
    usd: float = 0.0  # the chip-hours held at the profile's price

    @classmethod
    def of(cls, output: StageOutput, usd_per_chip_hour: float = 0.0) -> StageReport:
        return cls(stage=output.stage, status=output.status, duration_s=output.duration_s,
                   chip_hours=output.chip_hours, uris=output.uris, workloads=output.workloads,
                   usd=round(output.chip_hours * usd_per_chip_hour, 2))


class PipelineResult(BaseModel):
    profile: str
    backend: str
    artifacts: dict[str, str]
    stages: list[StageReport]
    chip_hours: float
    usd: float = 0.0
    metrics: dict[str, Any]
    # the training sentinel's findings, each with its policy (flows/health/sentinel.py)
    health: list[dict[str, Any]] = Field(default_factory=list)
    wall_s: float
    lock_wait_s: float = 0.0  # waiting for another run of the profile; not in any stage's time
    # With an eval section: the held-out scores (trained, base), the promotion decision and
    # the model promoted after it (flows/runpage/promotion.py); None without one.
    evaluation: dict[str, Any] | None = None
    # the recipe the model was trained with (flows/core/recipe_files.py recipe_summary: its
    # digest, reward function names, files with digests); {} in results made before it
    recipe: dict[str, Any] = Field(default_factory=dict)
    # tokens/s per chip, the step's split and $ per million tokens, from the programs' own
    # metrics (flows/core/throughput.py Throughput); None when no step's duration was logged
    throughput: dict[str, Any] | None = None
    # the training's TensorBoard event directory (gs:// on GKE): `tensorboard --logdir` it
    tensorboard_logdir: str | None = None
    # where the run was also reported: {"mlflow": run URL, "registry": version}
    tracking: dict[str, str] = Field(default_factory=dict)
    started_at: str
    finished_at: str

    @property
    def workload_wall_s(self) -> float:
        return sum(w.wall_s for s in self.stages for w in s.workloads)


def run_throughput(profile: Profile, metrics: dict[str, Any],
                   usd_per_chip_hour: float) -> dict[str, Any] | None:
    """The run's throughput (flows/core/throughput.py) per chip of its slice, or per CPU
    process on the rehearsal, labelled so. Never raises: a figure informs, it fails nothing."""
    from flows.core.throughput import CPU_LABEL, completions_per_step, measure

    try:
        completions = completions_per_step(profile.train.args)
        if profile.gke is None:
            found = measure(metrics, completions, 1, 0.0, CPU_LABEL, cpu=True)
        else:
            gke = gke_section(profile)
            hardware = (f"{gke.machine.generation} {gke.topology}"
                        + (f" x {gke.num_slices} slices" if gke.num_slices > 1 else "")
                        + f", {gke.total_chips} chips")
            found = measure(metrics, completions, gke.total_chips, usd_per_chip_hour, hardware)
    except (ValueError, KeyError, TypeError, ArithmeticError):
        return None
    return found.model_dump() if found is not None else None


def result_uris(profile: Profile, run_name: str) -> tuple[str, str]:
    base = join(Layout(profile).root, RESULTS_DIR, profile.name)
    # the run's name is untrusted text (an announced revision is part of it): one safe part
    return join(base, f"{path_part(run_name)}.json"), join(base, "latest.json")


def recent_results(storage: Storage, profile: Profile, limit: int = 5) -> list[PipelineResult]:
    """The profile's newest results (by when they finished), at most ``limit``, read-only;
    a result that does not read or parse is left out (what the bucket holds is untrusted)."""
    folder = result_uris(profile, "x")[0].rsplit("/", 1)[0]
    found: list[PipelineResult] = []
    try:  # latest.json repeats the newest run's own file
        names = [u for u in storage.files_under(folder) if u.endswith(".json")
                 and u.rsplit("/", 1)[-1] != "latest.json"]
    except Exception:  # no folder yet, or no access: no result to learn from
        return []
    for uri in names:
        try:
            result = PipelineResult.model_validate_json(storage.read_text(uri) or "")
        except Exception:  # a damaged or foreign file is no result
            continue
        if result.profile == profile.name:
            found.append(result)
    found.sort(key=lambda r: r.finished_at, reverse=True)
    return found[:limit]


READ_WITHIN_S = 20.0


def recent_results_within(storage: Storage, profile: Profile, seconds: float = READ_WITHIN_S,
                          limit: int = 5) -> list[PipelineResult] | None:
    """``recent_results``, given up after ``seconds``: None when the bucket did not answer in
    time. The cloud client retries an unreachable bucket for minutes (google-api-core's
    default retry deadline is 120 s a call); an estimate that only informs must not hold
    `tpurl plan --check` for that long. The read runs in a daemon thread, so a process that
    ends does not wait for it."""
    found: list[list[PipelineResult]] = []
    reader = threading.Thread(target=lambda: found.append(recent_results(storage, profile,
                                                                         limit)),
                              name="tpurl-recent-results", daemon=True)
    reader.start()
    reader.join(seconds)
    return found[0] if found else None


def throughput_status_line(results: list[PipelineResult]) -> str:
    """`tpurl status`'s line for the newest result that measured its throughput. Pure."""
    from flows.core.throughput import line_of

    for result in results:
        if line := line_of(result.throughput):
            return f"  last measured run ({result.finished_at[:16]} UTC): {line}"
    return "  throughput: no run of this profile has measured it yet"


def persist_result(storage: Storage, profile: Profile, run_name: str,
                   result: PipelineResult) -> str:
    run_uri, latest_uri = result_uris(profile, run_name)
    text = result.model_dump_json(indent=2)
    storage.write_text(run_uri, text)
    storage.write_text(latest_uri, text)
    return run_uri


def ensure_gcs_result_storage(profile: Profile, block_name: str = RESULT_BLOCK,
                              credentials_block: str | None = None) -> str:
    """Create or update the GcsBucket block for Prefect's results; return its slug."""
    from prefect_gcp import GcpCredentials, GcsBucket

    gke = gke_section(profile)  # Prefect result storage in GCS is for GKE profiles
    name = credentials_block or gke.gcp_credentials_block
    credentials = GcpCredentials.load(name) if name else GcpCredentials(project=gke.project)
    GcsBucket(bucket=gke.bucket, bucket_folder=RESULT_FOLDER,
              gcp_credentials=credentials).save(block_name, overwrite=True)
    return f"gcs-bucket/{block_name}"
