"""Does the Hugging Face download fit the convert pod's memory-backed scratch?

Why it matters: to_maxtext downloads the checkpoint's safetensors into HF_HOME, which lives on
a memory-backed emptyDir (flows/backends/gke/jobs/render.py). When it fills, the download
fails with "No space left on device" half-way through a 57 GiB transfer. Besides the files,
hf-xet keeps a chunk cache under HF_HOME (huggingface_hub: HF_XET_CACHE = HF_HOME/xet) of
HF_XET_CHUNK_CACHE_SIZE_BYTES: 10_000_000_000 by default in hf_xet up to 1.2.0, 0 from 1.3.0
(built with the no-default-cache feature: huggingface/xet-core#559, hf_xet/Cargo.toml,
xet_runtime/src/config/groups/chunk_cache.rs). The image's hf_xet version is not known here,
so the pod pins the cache to 0 (a download reads each chunk once; the cache would only take
memory) and the arithmetic counts it at that value.

Pure: sizes in, the arithmetic as text and the problem, if any, out.
"""

from __future__ import annotations

XET_CHUNK_CACHE_BYTES = 0
XET_CHUNK_CACHE_ENV = ("HF_XET_CHUNK_CACHE_SIZE_BYTES", str(XET_CHUNK_CACHE_BYTES))
OLD_XET_DEFAULT_GIB = 10_000_000_000 / 2**30  # hf_xet <= 1.2.0's default chunk cache
# Config, tokenizer and index files (MBs), hf-xet's reconstruction metadata and whatever
# to_maxtext writes to TMPDIR (unmeasured at 30B; nothing at the tiny model's size).
MARGIN_GIB = 4.0
GI = 2**30


def _g(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def needed_gib(download_gib: float) -> float:
    return download_gib + XET_CHUNK_CACHE_BYTES / GI + MARGIN_GIB


def arithmetic(download_gib: float) -> str:
    return (f"{_g(download_gib)} GiB safetensors + {_g(XET_CHUNK_CACHE_BYTES / GI)} GiB hf-xet "
            f"chunk cache ({XET_CHUNK_CACHE_ENV[0]}={XET_CHUNK_CACHE_ENV[1]}; hf_xet up to 1.2 "
            f"would keep {_g(OLD_XET_DEFAULT_GIB)} GiB) + {_g(MARGIN_GIB)} GiB margin = "
            f"{_g(needed_gib(download_gib))} GiB")


def plan_note(download_gib: float, scratch_bytes: float) -> str:
    scratch = scratch_bytes / GI
    spare = scratch - needed_gib(download_gib)
    return (f"HF download scratch: {arithmetic(download_gib)} <= {_g(scratch)} GiB of "
            f"gke.conversion_scratch_memory ({_g(spare)} GiB spare)")


def scratch_problem(download_gib: float, scratch_bytes: float) -> tuple[str, str] | None:
    """(problem, fix) when the scratch is smaller than the download needs."""
    need = needed_gib(download_gib)
    if scratch_bytes / GI >= need:
        return None
    return (f"the HF download does not fit the convert scratch: {arithmetic(download_gib)} > "
            f"{_g(scratch_bytes / GI)} GiB",
            f"set gke.conversion_scratch_memory to at least {int(-(-need // 1))}Gi (and "
            "gke.conversion_memory above it), or correct gke.hf_download_gib")
