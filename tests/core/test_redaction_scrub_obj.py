"""`Redactor.scrub_obj` (a run's context is scrubbed at every transition, every log event on its
way out): every string at every depth, keys too, comes out as `scrub` makes it (a list of strings
as consecutive lines), whatever the secret holds (quotes, backslashes, control characters,
non-ASCII), and no secret is left as a whole token."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.hosts.redaction import MASK, Redactor

# secrets with what JSON escapes: quotes, backslashes, control characters, non-ASCII, astral
SECRETS = ['tok"en\\1', "s3cr\u00e9t-\u4e2d", "line\nbreak", "emoji\U0001F600x", "plain-token-123", "a/b+c=d"]


def _text_with_secrets() -> st.SearchStrategy[str]:
    piece = st.one_of(st.text(max_size=8), st.sampled_from(SECRETS))
    return st.lists(piece, max_size=4).map("".join)


json_like = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), _text_with_secrets()),
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(_text_with_secrets(), children, max_size=4)),
    max_leaves=20,
)


def _each_string(obj: Any, fn: Any) -> Any:
    """The expectation: `fn` applied to every string, the shape kept; a list of two or more
    strings without line breaks is one text of lines."""
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, dict):
        return {fn(k): _each_string(v, fn) for k, v in obj.items()}
    if isinstance(obj, list):
        if len(obj) > 1 and all(isinstance(v, str) and "\n" not in v and "\r" not in v for v in obj):
            return fn("\n".join(obj)).split("\n")
        return [_each_string(v, fn) for v in obj]
    return obj


def _whole(secret: str, text: str) -> bool:
    """Whether `secret` is in `text` as a whole token (not inside a longer word)."""
    before = "(?<![A-Za-z0-9])" if secret[0].isascii() and secret[0].isalnum() else ""
    after = "(?![A-Za-z0-9])" if secret[-1].isascii() and secret[-1].isalnum() else ""
    return re.search(before + re.escape(secret) + after, text) is not None


def _strings(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for k, v in obj.items() for s in [k, *_strings(v)]]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


@settings(max_examples=300, deadline=None)
@given(json_like)
def test_every_string_at_every_depth_is_scrubbed_and_no_secret_is_left(obj):
    r = Redactor(*SECRETS)
    out = r.scrub_obj(obj)
    assert out == _each_string(obj, r.scrub)
    assert not any(_whole(secret, s) for s in _strings(out) for secret in SECRETS)


def test_a_secret_deep_in_a_context_is_masked_and_a_clean_context_comes_back_equal():
    r = Redactor('tok"en\\1')
    ctx = {"plans": {"s": {"actions": {"a": "x"}, "env": ["ok", {"k": 'Bearer tok"en\\1'}]}}}
    out = r.scrub_obj(ctx)
    assert out["plans"]["s"]["env"][1]["k"] == f"Bearer {MASK}"
    assert ctx["plans"]["s"]["env"][1]["k"] == 'Bearer tok"en\\1'  # the input is not changed
    clean = {"plans": {"s": {"actions": {"a": "x"}}}}
    assert r.scrub_obj(clean) == clean
    assert Redactor().scrub_obj(ctx) == ctx  # no secret known: nothing masked


def test_objects_json_cannot_write_are_scrubbed_too():
    class Secretive:
        def __repr__(self) -> str:
            return "Secretive(plain-token-123)"

    r = Redactor("plain-token-123")
    assert r.scrub_obj({"x": Secretive(), "t": ("plain-token-123",), "b": b"plain-token-123"}) == {
        "x": f"Secretive({MASK})", "t": (MASK,), "b": MASK.encode()}
