"""The one lock parser (flows/common/hashed_lock.py) reads what uv and pip write: a
requirement line, then its indented hash lines; comments and blank lines anywhere."""

from __future__ import annotations

from flows.common.hashed_lock import HashedPin, hashed_pins

A, B, C = "a" * 64, "b" * 64, "c" * 64


def test_each_pin_gets_the_hashes_under_it_in_order() -> None:
    text = (f"# via uv\nfoo==1.0 \\\n    --hash=sha256:{A} \\\n    --hash=sha256:{B}\n"
            f"    # via bar\n\nBar.Baz_q==2.0rc1 \\\n    --hash=sha256:{C}\n")
    assert hashed_pins(text) == [
        HashedPin("foo", "1.0", (A, B)),
        HashedPin("Bar.Baz_q", "2.0rc1", (C,))]


def test_a_hash_under_a_requirement_that_is_no_pin_never_joins_the_pin_above() -> None:
    text = (f"foo==1.0 \\\n    --hash=sha256:{A}\nbar @ https://example.invalid/bar.whl \\\n"
            f"    --hash=sha256:{B}\nqux==3 ; python_version >= '3.12' \\\n"
            f"    --hash=sha256:{C}\n")
    assert hashed_pins(text) == [
        HashedPin("foo", "1.0", (A,)),
        HashedPin("qux", "3", (C,))]


def test_a_pin_without_hashes_has_none_and_a_stray_hash_is_ignored() -> None:
    assert hashed_pins(f"    --hash=sha256:{A}\nfoo==1\n") == [HashedPin("foo", "1", ())]
    assert hashed_pins(f"foo==1 \\\n    --hash=md5:{A[:32]}\n") == [
        HashedPin("foo", "1", ())]
