"""The rehearsal venv (the stand-in image), built by the real image stage if missing."""

from __future__ import annotations

import logging

from flows.core.layout import Layout


def build_rehearsal_image() -> Layout:
    """Runs the rehearsal profile's image stage as the flow would; returns its Layout."""
    from flows.backends.local.backend import LocalBackend
    from flows.config import load_profile
    from flows.core.stage import StageContext
    from flows.core.storage import LocalStorage
    from flows.stages import STAGE_BY_NAME

    profile = load_profile("rehearsal", environ={})
    layout = Layout(profile)
    logger = logging.getLogger("tpurl-tests")
    backend = LocalBackend(profile, logger=logger, stage="image")
    ctx = StageContext(profile=profile, layout=layout, backend=backend, storage=LocalStorage(),
                       logger=logger)
    STAGE_BY_NAME["image"].execute(ctx, {})
    return layout
