"""LocalStorage.prune_empty: the tidy after a failed attempt removes the directories it left
empty and nothing else; links are entries, never followed (flows/core/storage.py)."""

from __future__ import annotations

from pathlib import Path

from flows.core.storage import LocalStorage, file_uri


def test_empty_directories_go_and_files_stay(tmp_path: Path) -> None:
    (tmp_path / "out" / "a" / "b").mkdir(parents=True)
    (tmp_path / "out" / "logs").mkdir()
    (tmp_path / "out" / "logs" / "train.log").write_text("why it failed\n")
    assert LocalStorage().prune_empty(file_uri(tmp_path / "out")) == 2
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["logs"]


def test_a_half_made_venv_with_its_lib64_link_is_tidied(tmp_path: Path) -> None:
    """What an interrupted `python -m venv` leaves: an empty lib and lib64 → lib."""
    venv = tmp_path / "venv"
    (venv / "lib").mkdir(parents=True)
    (venv / "lib64").symlink_to("lib", target_is_directory=True)
    assert LocalStorage().prune_empty(file_uri(venv)) == 1
    assert [p.name for p in venv.iterdir()] == ["lib64"]  # a link: never ours to remove


def test_a_link_to_an_empty_directory_elsewhere_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "users-empty-dir"
    elsewhere.mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "link").symlink_to(elsewhere, target_is_directory=True)
    assert LocalStorage().prune_empty(file_uri(tmp_path / "out")) == 0
    assert elsewhere.is_dir() and (tmp_path / "out" / "link").is_symlink()
