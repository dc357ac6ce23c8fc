"""scripts/uv_env.py: pip's configured package sources, translated for uv."""

from __future__ import annotations

from pathlib import Path

from scripts.uv_env import pip_options, uv_environment


def test_env_beats_config_files_and_only_known_options_are_read():
    listed = ("global.find-links='/from/config'\n:env:.find-links='/from/env'\n"
              "global.cert='/c.pem'\nglobal.no-binary=':all:'\n")
    assert pip_options(listed) == {"find-links": "/from/env", "cert": "/c.pem"}


def test_sources_that_exist_are_translated_and_set_variables_win(tmp_path: Path):
    wheels, constraints = tmp_path / "wheels", tmp_path / "c.txt"
    wheels.mkdir()
    constraints.write_text("torch<=2\n")
    options = {"extra-index-url": "file:///a/simple file:///b/simple",
               "find-links": f"{wheels} {tmp_path / 'gone'}", "constraint": str(constraints),
               "default-timeout": "180", "cert": str(tmp_path / "missing.pem")}
    assert uv_environment(options, {}) == {
        "UV_EXTRA_INDEX_URL": "file:///a/simple file:///b/simple", "UV_FIND_LINKS": str(wheels),
        "UV_CONSTRAINT": str(constraints), "UV_HTTP_TIMEOUT": "180",
        "UV_INDEX_STRATEGY": "unsafe-best-match"}
    kept = uv_environment(options, {"UV_FIND_LINKS": "/mine", "UV_INDEX_STRATEGY": "first-index"})
    assert "UV_FIND_LINKS" not in kept and "UV_INDEX_STRATEGY" not in kept


def test_nothing_configured_gives_nothing():
    assert uv_environment(pip_options(""), {}) == {}
