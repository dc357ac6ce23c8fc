"""What a W&B API key looks like, in the two uses the pipeline has for it.

``wandb_key_problem`` is the check wandb itself makes of a key before it uses one (wandb
0.31.0, the version the image and the tests pin: wandb/sdk/lib/wbauth/validation.py
``check_api_key``): a JWT of three base64url segments, or an optional prefix ending in '-'
(an on-prem server's ``local-``) before a secret of 40 or more word characters. That takes
the legacy keys (40 hex digits) and the current ones (``wandb_v1_`` and 77 more, 86 in all)
alike, and nothing wandb would refuse: the pre-flight check refuses such a value before the
first stage instead of the training program failing at ``wandb.init`` hours later.

``looks_like_wandb_key`` is narrower: it tells a profile field that *names* where a key is
kept (an environment variable, a secret's id) from one holding the key itself. wandb's own
rule would take any long variable name for a key, so this matches the keys W&B issues only.
"""

from __future__ import annotations

import re

from flows.common.token_shapes import WANDB_KEY

_JWT = re.compile(r"[\w-]+\.[\w-]+\.[\w-]+")
_SECRET = re.compile(r"[\w-]+")
MIN_SECRET = 40
_ISSUED = re.compile(rf"(?:[\w]+-)?[0-9a-f]{{40}}|{WANDB_KEY.pattern}")


def wandb_key_problem(key: str) -> str | None:
    """Why wandb would refuse ``key`` (a sentence that never quotes it), or None. Pure."""
    if not key:
        return "API key is empty."
    if _JWT.fullmatch(key):
        return None
    secret = key.split("-", 1)[-1]
    if not _SECRET.fullmatch(secret):
        return "API key may only contain the letters A-Z, digits and underscores."
    if len(secret) < MIN_SECRET:
        return f"API key must have 40+ characters, has {len(secret)}."
    return None


def looks_like_wandb_key(text: str) -> bool:
    """A legacy key (40 hex digits, maybe after an on-prem ``prefix-``) or a current one. Pure."""
    return bool(_ISSUED.fullmatch(text))
