"""What a credential looks like by itself, whoever holds it: the shapes the log redaction
blanks (flows/core/redaction.py) and the profile refuses to quote back
(flows/config/errors.py). One list for both, below config and core, which import each other
one way only (tests/test_import_graph.py)."""

from __future__ import annotations

import re

HF_TOKEN = re.compile(r"hf_[A-Za-z0-9]{20,}")  # a Hugging Face user access token
GOOGLE_ACCESS_TOKEN = re.compile(r"ya29\.[A-Za-z0-9._-]{20,}")  # an OAuth2 access token
# the same token upper-cased by a program (issue 37.7); a digit is required, so a long
# upper-case constant such as HF_HUB_ENABLE_HF_TRANSFER is not taken for one
HF_TOKEN_UPPER = re.compile(r"HF_(?=[A-Z]*[0-9])[A-Z0-9]{20,}")
# a W&B API key of the current format (wandb_v1_ and 77 letters and digits); a legacy one is
# 40 hex digits, which a git commit is too, so only a registered value is blanked for those
WANDB_KEY = re.compile(r"wandb_v[0-9]+_[A-Za-z0-9]{20,}")
# what stands before the '@' of an http(s) address: a user and password, or a token as user
# (https://user:pass@host, http://token@host); the scheme and host stay readable
URL_USERINFO = re.compile(r"(?:(?<=http://)|(?<=https://))[^\s/@?#]+(?=@)", re.IGNORECASE)
# a query parameter named like a credential (?token=, &access_token=, ?api_key=, ?sig=):
# group 1, the name, is kept, the value blanked
URL_QUERY_SECRET = re.compile(
    r"(?i)([?&][\w.-]*(?:token|key|secret|passw(?:or)?d|pwd|sig|signature|auth|credential)"
    r"[\w.-]*=)[^&#\s'\"]+")
# (marker, pattern): the marker is a cheap substring test before the expression; a pattern
# with a group keeps that group (the part that names what was blanked)
TOKEN_SHAPES = (("hf_", HF_TOKEN), ("HF_", HF_TOKEN_UPPER), ("ya29.", GOOGLE_ACCESS_TOKEN),
                ("wandb_v", WANDB_KEY),
                ("@", URL_USERINFO), ("=", URL_QUERY_SECRET))
