"""Prints `export UV_…=…` lines that give uv the package sources pip is configured with here.

uv does not read pip.conf or PIP_* variables, so on a machine whose pip is pointed at extra
indexes, local wheel folders (find-links) or a global constraint file, a bare `uv pip install`
would resolve against PyPI alone and miss what only those sources hold (e.g. a CPU torch build
in a find-links folder). This reads pip's own view (`pip config list`, which merges the config
files and PIP_* variables) and translates what exists; a variable already set wins. With extra
indexes, uv is told to pick the best match across all indexes, as pip does (uv's default takes
a package from the first index that has it).

Usage: eval "$(.venv/bin/python scripts/uv_env.py)"
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping

# pip option -> (uv variable, separator uv expects between several values)
OPTIONS = {"index-url": ("UV_INDEX_URL", None), "extra-index-url": ("UV_EXTRA_INDEX_URL", " "),
           "find-links": ("UV_FIND_LINKS", ","), "constraint": ("UV_CONSTRAINT", " "),
           "timeout": ("UV_HTTP_TIMEOUT", None), "default-timeout": ("UV_HTTP_TIMEOUT", None),
           "cert": ("SSL_CERT_FILE", None)}
LINE = re.compile(r"^(?P<section>[^.]*)\.(?P<key>[a-z-]+)='(?P<value>.*)'$")


def pip_options(config_list: str) -> dict[str, str]:
    """The value of each option in `pip config list` output; a PIP_* variable (section
    ':env:') beats a config file, as it does for pip."""
    found: dict[str, str] = {}
    for line in config_list.splitlines():
        match = LINE.match(line.strip())
        if not match or match["key"] not in OPTIONS:
            continue
        if match["section"] == ":env:" or match["key"] not in found:
            found[match["key"]] = match["value"]
    return found


def uv_environment(options: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """UV_* values for the pip options that exist (paths that are gone are left out)."""
    out: dict[str, str] = {}
    for key, value in options.items():
        name, sep = OPTIONS[key]
        values = value.split()
        if key in ("find-links", "constraint", "cert"):
            values = [v for v in values if os.path.exists(v.removeprefix("file://"))]
        if not values or name in environ or name in out:
            continue
        out[name] = sep.join(values) if sep else values[0]
    if "UV_EXTRA_INDEX_URL" in out and "UV_INDEX_STRATEGY" not in environ:
        out["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    return out


def main() -> int:
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                            text=True, check=False).stdout
    for name, value in uv_environment(pip_options(listed), os.environ).items():
        print(f"export {name}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
