"""Where the CPU rehearsal proves the real run, and where it does not.

The rehearsal runs the real MaxText programs from the versions of
images/rehearsal/requirements.lock; the real run uses whatever the post-training image
carries. A step is proven by the rehearsal only where the packages it runs on have the same
versions in both. What the image carries is known from its record once it is built (its
check step reads it from the image: `pip freeze`'s source, importlib.metadata), and before
that only for a base listed below.

Pure: the lock text and the versions in, plan lines out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from flows.core.patching import PARITY_PACKAGES, PatchDeclaration, distribution_key

# What each package decides in the real run.
STEPS = {"maxtext": "convert, train and export (the MaxText programs)",
         "google-tunix": "train (the GRPO loop, optimizer sharding)",
         "jax": "every stage", "vllm": "train (rollouts)",
         "tpu-inference": "train (vLLM on TPU)",
         "transformers": "convert and export (Hugging Face checkpoints)",
         "orbax-checkpoint": "convert, train and export (checkpoints)"}
# Versions known for a base before it is built: MaxText's release names the image
# (tpu_post_training:0.2.4 is MaxText 0.2.4), its tpu-post-train extra resolves jax 0.11.0
# (flows/backends/gke/infra/preflight/access.py KNOWN_IMAGE_JAX), and its post-training
# install takes tunix from a GitHub commit whose pyproject says 0.1.8 (maxtext-v0.2.4
# src/dependencies/extra_deps/post_train_github_deps.txt:1, installed --no-deps by
# src/dependencies/scripts/install_post_train_extra_deps.py:99-109). Nothing else is known.
# A version installed from a commit is written VERSION@COMMIT, as installed_versions writes it.
TUNIX_COMMIT_0_2_4 = "c4ec573d29e4c3a3955b348256d464b119c8a6d1"
KNOWN_BASE_PACKAGES = {
    "us-docker.pkg.dev/cloud-tpu-images/maxtext-images/tpu_post_training:0.2.4":
        {"maxtext": "0.2.4", "jax": "0.11.0", "google-tunix": f"0.1.8@{TUNIX_COMMIT_0_2_4}"},
}
_GIT_PIN = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+) @ git\+\S+@(?P<commit>[0-9a-f]{40})$")


def lock_versions(lock_text: str) -> dict[str, str]:
    """``name==version`` lines of a pip-compile lock, by normalised name."""
    out = {}
    for line in lock_text.splitlines():
        if m := re.match(r"^([A-Za-z0-9_.-]+)==([^\s;#]+)", line.strip()):
            out[distribution_key(m[1])] = m[2]
    return out


def rehearsal_versions(lock_text: str, github_text: str) -> dict[str, str]:
    """The rehearsal's versions: the lock's, a package the rehearsal installs from a commit
    (images/rehearsal/tunix-from-github.txt; its wheel is built from the same commit) as
    VERSION@COMMIT, so a tunix 0.1.8 of another commit is not taken for the same."""
    out = lock_versions(lock_text)
    for line in github_text.splitlines():
        if (m := _GIT_PIN.match(line.strip())) and (name := distribution_key(m["name"])) in out:
            out[name] = f"{out[name]}@{m['commit']}"
    return out


def read_rehearsal_versions() -> dict[str, str]:
    from flows.common.paths import REHEARSAL_LOCK, TUNIX_GITHUB_FILE

    return rehearsal_versions(REHEARSAL_LOCK.read_text(), TUNIX_GITHUB_FILE.read_text())


def parity_lines(base: str, lock: Mapping[str, str], image: Mapping[str, str] | None,
                 patches: list[PatchDeclaration]) -> list[str]:
    """The plan's section: per package, rehearsal vs image, and what is not proven; then the
    patches the rehearsal measured failing and whether this image would be refused."""
    have = dict(image) if image is not None else KNOWN_BASE_PACKAGES.get(base, {})
    source = "its record" if image is not None else "known for this base before it is built"
    lines = [f"rehearsal parity (images/rehearsal/requirements.lock vs {base}, {source}):"]
    for name in PARITY_PACKAGES:
        ours, theirs = lock.get(name), have.get(name)
        if ours is not None and ours == theirs:
            lines.append(f"  {name}: {ours} in both")
        elif ours is None and theirs is None and image is not None:
            lines.append(f"  {name}: not installed in either")
        elif theirs is None and image is None:
            lines.append(f"  {name}: rehearsal {ours or 'not installed'}, image unknown until "
                         f"it is built: the rehearsal does not prove {STEPS[name]}")
        else:
            lines.append(f"  {name}: rehearsal {ours or 'not installed'}, image "
                         f"{theirs or 'not installed'}: "
                         f"the rehearsal does not prove {STEPS[name]}")
    for patch in patches:
        if not patch.failed_in_rehearsal:
            continue
        same = ", ".join(f"{k}=={v}" for k, v in sorted(patch.failed_in_rehearsal.items()))
        known = all(have.get(distribution_key(k)) == v
                    for k, v in patch.failed_in_rehearsal.items())
        verdict = ("this image carries them: the image stage refuses it before pushing"
                   if known else "the image stage refuses it before pushing if the built "
                   "image carries them")
        lines.append(f"  patch {patch.id}: failed in the rehearsal with {same}; {verdict}")
    return lines
