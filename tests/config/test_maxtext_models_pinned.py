"""flows/config/maxtext_models.json is what scripts/maxtext_models.py makes of the pinned MaxText.

Read from the rehearsal venv, which the `rehearsal_image` fixture builds with the real image
stage when it is missing, as tests/config/test_maxtext_keys_pinned.py reads the key file."""

from __future__ import annotations

import json
import sys

from flows.common.paths import REPO_ROOT
from flows.config.maxtext_models import MODELS_FILE, pinned_version

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import maxtext_models as generator


def test_the_model_file_regenerates_from_the_pinned_package(rehearsal_image):
    version = pinned_version()
    site = [d for d in sorted((rehearsal_image.venv_dir() / "lib").glob("python3*/site-packages"))
            if (d / f"maxtext-{version}.dist-info").is_dir()]
    assert site, f"maxtext {version} is not in {rehearsal_image.venv_dir()}"
    assert generator.build(site[0]) == json.loads(MODELS_FILE.read_text())
