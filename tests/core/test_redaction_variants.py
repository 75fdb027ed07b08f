"""The forms a secret is found in (`Redactor`, orchestrator/hosts/redaction.py): as a whole token,
JSON-escaped, percent-encoded in either case, base64 and base64url (alone and inside a
`Basic <b64(user:secret)>` blob), and split across two consecutive lines; `scrub`,
`contains_secret` and `scrub_obj` agree on each.

Mutation list (each guard was disabled in the source, the test run and seen failing, the source
restored):
- `_END` -> "" -> test_a_secret_inside_a_longer_word_is_not_hidden; `_START`'s first look-behind
  dropped -> same test; the escape look-behinds dropped -> test_a_secret_right_after_an_escape_is_hidden.
- `_any_case_hex` upper case only -> test_percent_encoded_in_either_case_is_hidden[lower];
  the `\\+` form for a space dropped -> [plus].
- `_any_case_json` exact case -> test_json_escaped_forms_are_hidden; the `\\\\/` form dropped -> same.
- `_b64_cores` only `pad=0` -> test_base64_inside_a_basic_header_is_hidden_at_every_alignment;
  the url-safe translation dropped -> test_base64_forms_of_a_secret_are_hidden[urlsafe];
  the blob expansion in `_spans` dropped -> test_the_whole_base64_blob_is_hidden;
  `MIN_B64_CORE` 8 -> 1 -> test_a_short_secrets_base64_core_is_not_searched_for.
- `_GAP` -> "" -> test_a_secret_split_across_two_lines_is_hidden_and_the_lines_stay;
  `_LOG_PREFIX` out of `_BREAK` -> [compose-prefix]; the `\\\\n` break dropped -> [json-escaped];
  `_mask`'s prefix kept unconditionally -> test_a_log_prefix_is_kept_only_when_it_is_the_lines_own.
- `_anchors` returning only the first half, or `may_hold_text` reading only `heads` ->
  test_every_split_point_of_an_anchored_secret_is_found; a JSON-escaped `\\n` not counted as a
  line break there -> test_a_secret_split_across_two_lines_is_hidden_and_the_lines_stay[json-escaped];
  `always` never run -> test_a_secret_without_an_anchor_is_found; `b64_run` longer than the
  shortest core -> test_base64_inside_a_basic_header_is_hidden_at_every_alignment.
- `scrub_lines` -> per-element scrub -> test_scrub_obj_reads_a_list_of_strings_as_lines.
- the span merge `<` -> `<=` -> test_adjacent_secrets_are_masked_each.
- `_char_pattern` with the literal form first -> test_percent_encoded_in_either_case_is_hidden
  (`%25` read as `%`).
"""

from __future__ import annotations

import base64
import json
import re
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.hosts.redaction import MASK, Redactor

TOKEN = "hf_E35EnITNjH0v6Dgvw7S6gakr8jARkwcvGX"
ODD = "a b&c=d/é\"x"  # a space, URL-reserved characters, non-ASCII, a quote


def _lower_pct(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), text)


def _check(r: Redactor, text: str, expected: str) -> None:
    assert r.scrub(text) == expected
    assert r.contains_secret(text) is (expected != text)


def test_a_secret_inside_a_longer_word_is_not_hidden():
    r = Redactor("hunter22", TOKEN)
    for text in ("hunter222", "xhunter22", "hunter22x", "x" + TOKEN, TOKEN + "0"):
        _check(r, text, text)
    for text, out in [("(hunter22)", "(***)"), ("pw=hunter22;", "pw=***;"), ("_hunter22_", "_***_"),
                      (f"Bearer {TOKEN}", "Bearer ***"), ("hunter22", "***")]:
        _check(r, text, out)


def test_a_secret_right_after_an_escape_is_hidden():
    r = Redactor(TOKEN)
    for before in ("%3D", "%3d", "\\n", "\\t", "\\u00e9", "\x1b[31m", "\x1b[1;31m", "\x1b[m"):
        _check(r, f"k={before}{TOKEN}\x1b[0m", f"k={before}***\x1b[0m")


@pytest.mark.parametrize("encode", [
    lambda s: quote(s, safe=""), lambda s: _lower_pct(quote(s, safe="")), lambda s: quote_plus(s, safe=""),
    lambda s: _lower_pct(quote_plus(s, safe="")), lambda s: quote(s, safe="/&= "),
], ids=["upper", "lower", "plus", "plus-lower", "partly"])
def test_percent_encoded_in_either_case_is_hidden(encode):
    r = Redactor(ODD, "pw-Zq9-100%")
    _check(r, f"GET /cb?next={encode(ODD)}&x=1", "GET /cb?next=***&x=1")
    _check(r, f"GET /cb?pw={encode('pw-Zq9-100%')}&x=1", "GET /cb?pw=***&x=1")  # `%25` read whole


def test_json_escaped_forms_are_hidden():
    r = Redactor(ODD, "tok/en\\1é")
    assert json.dumps(ODD) == '"a b&c=d/\\u00e9\\"x"'
    for text in ('{"v": "a b&c=d/\\u00e9\\"x"}', '{"v": "a b&c=d/\\u00E9\\"x"}', '{"v": "a b&c=d\\/é\\"x"}',
                 '{"v": "tok\\/en\\\\1\\u00e9"}', json.dumps({"v": "tok/en\\1é"}, ensure_ascii=False)):
        _check(r, text, '{"v": "***"}')


@pytest.mark.parametrize("encode", [base64.b64encode, base64.urlsafe_b64encode], ids=["standard", "urlsafe"])
def test_base64_forms_of_a_secret_are_hidden(encode):
    secret = "sk-proj-R3yg3xqvJHnhd10zWP9-FNVpE?c9NB>5DqMn7FAd"  # '?' and '>' give '/' and '+' in base64
    blob = encode(secret.encode()).decode()
    assert set(blob) & set("+/-_")
    r = Redactor(secret)
    _check(r, f"Authorization: Bearer {blob}\n", "Authorization: Bearer ***\n")


@pytest.mark.parametrize("user", ["", "u", "ad", "orch", "admin", "orchestrator"])
def test_base64_inside_a_basic_header_is_hidden_at_every_alignment(user):
    blob = base64.b64encode(f"{user}:{TOKEN}".encode()).decode()
    r = Redactor(TOKEN)
    _check(r, f'curl -H "Authorization: Basic {blob}" http://cm', 'curl -H "Authorization: Basic ***" http://cm')


def test_the_whole_base64_blob_is_hidden():
    blob = base64.b64encode(f"orchestrator-user-name:{TOKEN}:and-more-after".encode()).decode()
    r = Redactor(TOKEN)
    assert r.scrub(f"x {blob} y") == "x *** y"


def test_a_short_secrets_base64_core_is_not_searched_for():
    r = Redactor("abc")
    other = base64.b64encode(b"abcdef-not-a-secret").decode()  # starts with b64("abc") = YWJj
    _check(r, f"blob {other}", f"blob {other}")


@pytest.mark.parametrize("split", [
    lambda h, t: f"token {h}\n{t} end",
    lambda h, t: f"token {h}\r\n{t} end",
    lambda h, t: f"r1-1  | token {h}\nr1-1  | {t} end",
    lambda h, t: json.dumps(f"token {h}\n{t} end"),
], ids=["lf", "crlf", "compose-prefix", "json-escaped"])
def test_a_secret_split_across_two_lines_is_hidden_and_the_lines_stay(split):
    r = Redactor(TOKEN)
    text = split(TOKEN[:15], TOKEN[15:])
    out = r.scrub(text)
    assert TOKEN[:15] not in out and TOKEN[15:] not in out and r.contains_secret(text)
    assert out.count("\n") == text.count("\n")
    if "|" in text:
        assert out == "r1-1  | token ***\nr1-1  | *** end"


def test_a_log_prefix_is_kept_only_when_it_is_the_lines_own():
    secret = "abcdefgh12-| tail-part"
    r = Redactor(secret)
    assert r.scrub("r1 | x abcdefgh12-\nr1 | | tail-part y") == "r1 | x ***\nr1 | *** y"
    other = Redactor("abcdefgh12-zz | tail-part")
    assert other.scrub("x abcdefgh12-\nzz | tail-part y") == "x ***\n*** y"  # `zz | ` is the secret's, not a prefix


def test_every_split_point_of_an_anchored_secret_is_found():
    r = Redactor(TOKEN)
    for i in range(1, len(TOKEN)):
        text = f"a {TOKEN[:i]}\n{TOKEN[i:]} b"
        assert r.scrub(text) == "a ***\n*** b", i


def test_a_secret_without_an_anchor_is_found():
    r = Redactor("pw-Zq9-unique", "x!y")
    _check(r, "auth=pw-Zq9-unique and x!y", "auth=*** and ***")
    _check(r, "auth=pw-Zq9-\nunique", "auth=***\n***")


def test_scrub_obj_reads_a_list_of_strings_as_lines():
    r = Redactor(TOKEN)
    lines = ["pulling", f"token {TOKEN[:10]}", f"{TOKEN[10:]} ok", "done"]
    assert r.scrub_obj({"lines": lines}) == {"lines": ["pulling", "token ***", "*** ok", "done"]}
    assert r.scrub_obj({"lines": ["a", "b"]}) == {"lines": ["a", "b"]}


def test_adjacent_secrets_are_masked_each():
    r = Redactor("000", ":00")
    assert r.scrub("000:00") == "******"


_SECRET = st.text(st.characters(blacklist_categories=("Cs",)), min_size=8, max_size=24).filter(
    lambda s: s.strip() == s and "\n" not in s and "\r" not in s)


@settings(max_examples=300, deadline=None)
@given(secret=_SECRET, form=st.sampled_from(["raw", "json", "pct", "pct-lower", "plus", "b64", "b64url", "basic",
                                             "split"]), cut=st.integers(1, 23))
def test_every_form_of_any_secret_is_hidden(secret, form, cut):
    cut = min(cut, len(secret) - 1)
    encoded = {
        "raw": secret, "json": json.dumps(secret)[1:-1], "pct": quote(secret, safe=""),
        "pct-lower": _lower_pct(quote(secret, safe="")), "plus": quote_plus(secret, safe=""),
        "b64": base64.b64encode(secret.encode()).decode(), "b64url": base64.urlsafe_b64encode(secret.encode()).decode(),
        "basic": "Basic " + base64.b64encode(f"user:{secret}".encode()).decode(),
        "split": f"{secret[:cut]}\n{secret[cut:]}",
    }[form]
    r = Redactor(secret)
    text = f"<< {encoded} >>"
    expected = {"split": f"<< {MASK}\n{MASK} >>", "basic": f"<< Basic {MASK} >>"}.get(form, f"<< {MASK} >>")
    _check(r, text, expected)
