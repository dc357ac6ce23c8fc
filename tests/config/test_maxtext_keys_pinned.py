"""flows/config/maxtext_keys.json is what scripts/maxtext_keys.py makes of the pinned MaxText.

Read from the rehearsal venv, which the `rehearsal_image` fixture builds with the real image
stage when it is missing (so this runs in every CI run, in the services tier, instead of
being skipped on a machine without the venv)."""

from __future__ import annotations

import json
import sys

from flows.common.paths import REPO_ROOT
from flows.config.maxtext_keys import KEYS_FILE, pinned_version

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import maxtext_keys as generator


def test_the_key_file_regenerates_from_the_pinned_package(rehearsal_image):
    version = pinned_version().removeprefix("maxtext-")
    site = [d for d in sorted((rehearsal_image.venv_dir() / "lib").glob("python3*/site-packages"))
            if (d / f"maxtext-{version}.dist-info").is_dir()]
    assert site, f"maxtext {version} is not in {rehearsal_image.venv_dir()}"
    assert generator.build(site[0]) == json.loads(KEYS_FILE.read_text())
