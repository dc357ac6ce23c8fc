"""The tool's places and its ownership marker (flows/common/ownership.py), on real directories:
a home directory, ``/``, the repository itself and a symlink that leads out are refused as
places; a directory without the marker is never removed, whatever it holds."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from flows.common.ownership import (
    OWNER_MARKER,
    NotOurs,
    claim,
    owned,
    place_problem,
    remove_owned,
)
from flows.common.paths import REPO_ROOT, tool_places
from tests.support.other_user import other_user


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A home, a cache and a temporary directory of their own, none inside another."""
    home, cache, temp = tmp_path / "home", tmp_path / "cache", tmp_path / "temp"
    for d in (home, cache, temp):
        d.mkdir()
    (home / "thesis.tex").write_text("years of work")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TPURL_CACHE_DIR", str(cache))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    return {"home": home, "cache": cache, "temp": temp}


@pytest.mark.parametrize("path", ["~", "~/", "/", "~/.venvs/rehearsal", "..", "../elsewhere"])
def test_a_path_outside_the_places_is_refused(world: dict[str, Path], path: str) -> None:
    from flows.common.paths import repo_relative

    problem = place_problem(repo_relative(path), tool_places())
    assert problem is not None and "not inside the repository" in problem


@pytest.mark.parametrize("which", ["repo", "cache", "temp"])
def test_a_place_itself_is_refused_and_below_it_is_allowed(world: dict[str, Path],
                                                           which: str) -> None:
    place = {"repo": REPO_ROOT, "cache": world["cache"], "temp": world["temp"]}[which]
    assert place_problem(place, tool_places()) is not None  # the repository itself is never a venv
    assert place_problem(place / "venvs" / "rehearsal", tool_places()) is None


def test_a_symlink_inside_a_place_that_leads_out_is_refused(world: dict[str, Path]) -> None:
    link = world["cache"] / "venv"
    link.symlink_to(world["home"])
    problem = place_problem(link, tool_places())
    assert problem is not None and f"resolves to {world['home']}" in problem
    nested = world["cache"] / "link-dir"
    nested.symlink_to(world["home"], target_is_directory=True)
    assert place_problem(nested / "rehearsal", tool_places()) is not None  # a link on the way counts too


def test_a_directory_without_the_marker_is_never_removed(world: dict[str, Path]) -> None:
    with pytest.raises(NotOurs, match="without the tool's marker"):
        remove_owned(world["home"])
    assert (world["home"] / "thesis.tex").read_text() == "years of work"


def test_a_symlink_to_an_owned_directory_is_not_followed(world: dict[str, Path]) -> None:
    mine = world["cache"] / "mine"
    claim(mine)
    (mine / "file").write_text("x")
    link = world["cache"] / "link"
    link.symlink_to(mine)
    assert not owned(link)
    with pytest.raises(NotOurs):
        remove_owned(link)
    assert (mine / "file").exists()


def test_a_claimed_directory_is_removed(world: dict[str, Path]) -> None:
    venv = world["cache"] / "venvs" / "rehearsal"
    claim(venv)
    assert (venv / OWNER_MARKER).is_file()
    (venv / "bin").mkdir()
    remove_owned(venv)
    assert not venv.exists()
    remove_owned(venv)  # absent: nothing to do


def test_claiming_a_directory_that_holds_files_is_refused(world: dict[str, Path]) -> None:
    with pytest.raises(NotOurs, match="already holds files"):
        claim(world["home"])
    assert not (world["home"] / OWNER_MARKER).exists()
    link = world["cache"] / "link"
    link.symlink_to(world["temp"])
    with pytest.raises(NotOurs, match="symbolic link"):
        claim(link)


def test_a_marker_counts_only_with_the_owner_of_the_directory(world: dict[str, Path]) -> None:
    """Another local user's directory, marker and all, is never removed, even by root; nor
    is a directory of ours whose marker another user planted, nor one of ours holding
    another user's files."""
    other = other_user()
    theirs = world["temp"] / "theirs"
    theirs.mkdir()
    (theirs / OWNER_MARKER).write_text("planted\n")
    (theirs / "work.txt").write_text("their work")
    other.own(theirs, theirs / OWNER_MARKER, theirs / "work.txt")
    with pytest.raises(NotOurs, match=r"belongs to uid \d+ \(nobody\)"):
        remove_owned(theirs)
    assert not owned(theirs) and (theirs / "work.txt").read_text() == "their work"
    with pytest.raises(NotOurs, match="belongs to"):
        claim(theirs)

    # our directory, opened to everyone, where the other user plants the marker
    shared = world["temp"] / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "notes.txt").write_text("ours")
    marker = shared / OWNER_MARKER
    marker.write_text("planted\n")
    other.own(marker)
    with pytest.raises(NotOurs, match=f"its {OWNER_MARKER} belongs to"):
        remove_owned(shared)
    assert (shared / "notes.txt").read_text() == "ours"

    # a directory we made, into which another user's file found its way
    mine = world["cache"] / "mine"
    claim(mine)
    (mine / "sub").mkdir()
    (mine / "sub" / "theirs.txt").write_text("x")
    other.own(mine / "sub" / "theirs.txt")
    with pytest.raises(NotOurs, match=r"theirs\.txt, which belongs to"):
        remove_owned(mine)
    assert (mine / "sub" / "theirs.txt").exists()


def test_a_directory_made_by_another_user_process_is_refused(tmp_path: Path) -> None:
    """The other user's own process, not a chown: it makes a directory with our marker in a
    sticky, world-writable place (like /tmp), and the tool refuses to claim or remove it."""
    other = other_user()
    place = Path(tempfile.mkdtemp(dir="/tmp", prefix="tpurl-shared-"))
    try:
        place.chmod(0o1777)
        venv = place / "venv"
        other.run(["sh", "-c", f"mkdir {venv} && echo planted > {venv / OWNER_MARKER} "
                   f"&& echo theirs > {venv / 'data'}"])
        assert venv.stat().st_uid == other.uid
        with pytest.raises(NotOurs, match="belongs to"):
            remove_owned(venv)
        with pytest.raises(NotOurs, match="belongs to"):
            claim(venv)
        assert (venv / "data").read_text() == "theirs\n"
    finally:
        shutil.rmtree(place)
