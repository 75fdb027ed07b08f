"""`Redactor.scrub_obj`'s fast path (issue 25: a run's context is scrubbed at every transition):
a JSON-shaped object whose JSON text holds no secret is returned unwalked. It must never let a
secret through: whatever the object, the result equals the full walk's."""

from __future__ import annotations

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


@settings(max_examples=300, deadline=None)
@given(json_like)
def test_the_fast_path_scrubs_exactly_what_the_walk_scrubs(obj):
    r = Redactor(*SECRETS)
    assert r.scrub_obj(obj) == r._scrub_walk(obj)


def test_a_secret_deep_in_a_context_is_masked_and_a_clean_context_returned_as_is():
    r = Redactor('tok"en\\1')
    ctx = {"plans": {"s": {"actions": {"a": "x"}, "env": ["ok", {"k": 'Bearer tok"en\\1'}]}}}
    out = r.scrub_obj(ctx)
    assert out["plans"]["s"]["env"][1]["k"] == f"Bearer {MASK}"
    clean = {"plans": {"s": {"actions": {"a": "x"}}}}
    assert r.scrub_obj(clean) is clean


def test_objects_json_cannot_write_take_the_walk():
    class Secretive:
        def __repr__(self) -> str:
            return "Secretive(plain-token-123)"

    r = Redactor("plain-token-123")
    assert r.scrub_obj({"x": Secretive(), "t": ("plain-token-123",)}) == {"x": f"Secretive({MASK})", "t": (MASK,)}
