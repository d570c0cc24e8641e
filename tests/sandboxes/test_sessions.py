"""``sandboxes.sessions.Held``: a session gets its own box back, at most ``limit`` are held (the least recently
used is given back first), and every box leaves through ``give_back`` (the clean-up), never silently."""

from __future__ import annotations

import pytest

from sandboxes.sessions import Held


def test_sessions_keep_their_box_and_the_least_recently_used_is_given_back() -> None:
    given: list[str] = []
    held: Held[str] = Held(2, given.append)
    held.keep("a", "box-a")
    held.keep("b", "box-b")
    assert held.take("a") == "box-a"  # in flight: not held meanwhile
    assert held.take("a") is None
    held.keep("a", "box-a")  # a is now the most recently used
    held.make_room()  # a third session wants one: b (least recently used) is cleaned and given back
    assert given == ["box-b"]
    held.keep("c", "box-c")
    assert given == ["box-b"] and held.take("b") is None
    held.end("a")
    held.end("nobody")
    assert given == ["box-b", "box-a"]
    assert held.close() == ["box-c"]  # closing: the caller removes what is left


def test_a_second_box_for_one_session_gives_the_first_back() -> None:
    given: list[str] = []
    held: Held[str] = Held(4, given.append)
    held.keep("a", "first")
    held.keep("a", "second")  # two concurrent runs of one session: one box stays, the other is cleaned
    assert given == ["first"] and held.take("a") == "second"


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="held sessions must be >= 1"):
        Held(0, print)
