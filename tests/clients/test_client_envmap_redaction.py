import json
import pickle

import pytest
import structlog
from pydantic import SecretStr
from rich.pretty import pretty_repr

from orchestrator.hosts.envmap import EnvMap
from orchestrator.hosts.redaction import MASK, Redactor

VALUES = {"PROXY_TOKEN": "sk-proxy-0123456789", "ENV": "prod", "EMPTY": "", "ONE": "1", "HOST_IP": "10.0.0.2"}


def test_envmap_renderings_show_keys_only():
    env = EnvMap(VALUES)
    renderings = [
        repr(env), str(env), f"{env}", f"{env!r}", "%s" % (env,), pretty_repr(env), pretty_repr({"env": env}),  # noqa: UP031 - the %-form is one of the renderings under test
        structlog.processors.JSONRenderer()(None, "info", {"event": "x", "env": env}),
        structlog.dev.ConsoleRenderer(colors=False)(None, "info", {"event": "x", "env": env}),
        structlog.processors.KeyValueRenderer()(None, "info", {"event": "x", "env": env}),
        json.dumps({"env": env}, default=str),
    ]
    for text in renderings:
        for value in ("sk-proxy-0123456789", "prod", "10.0.0.2"):
            assert value not in text, text
    assert repr(env) == "EnvMap(5 keys: EMPTY, ENV, HOST_IP, ONE, PROXY_TOKEN)"
    assert repr(EnvMap({})) == "EnvMap(0 keys)"
    assert "PROXY_TOKEN" in pretty_repr(env)


def test_envmap_is_an_immutable_mapping_and_bodies_are_copies():
    env = EnvMap(VALUES)
    assert env["ENV"] == "prod" and len(env) == 5 and set(env) == set(VALUES)
    assert env == EnvMap(dict(VALUES)) and hash(env) == hash(EnvMap(dict(VALUES)))
    with pytest.raises(TypeError):
        env["ENV"] = "dev"  # type: ignore[index]
    with pytest.raises(AttributeError):
        env.x = 1  # type: ignore[attr-defined]
    body = env.as_body()
    assert body == VALUES
    body["ENV"] = "changed"
    assert env["ENV"] == "prod"
    assert pickle.loads(pickle.dumps(env)) == env


def test_envmap_refuses_non_string_values_without_quoting_them():
    with pytest.raises(TypeError) as err:
        EnvMap({"PORT": 8000})  # type: ignore[dict-item]
    assert "PORT" in str(err.value) and "8000" not in str(err.value)


def test_keys_fingerprint():
    env = EnvMap(VALUES)
    same_keys = EnvMap({k: "other" for k in VALUES})
    assert env.keys_fingerprint() == same_keys.keys_fingerprint()
    assert env.keys_fingerprint() != EnvMap({"ENV": "prod"}).keys_fingerprint()
    assert len(env.keys_fingerprint()) == 64


def test_redactor_hides_values_of_three_chars_or_more():
    r = Redactor("sk-proxy-0123456789", "prod", "1", "", "ab", "abc", SecretStr("pydantic-secret"))
    text = "token sk-proxy-0123456789 env prod one 1 ab abc pydantic-secret"
    assert r.scrub(text) == f"token {MASK} env {MASK} one 1 ab {MASK} {MASK}"


def test_redactor_longest_secret_first_and_echo_forms():
    r = Redactor("secret", "secret-long-value", 'qu"ote\\x', "a b&c=d")
    assert r.scrub("secret-long-value") == MASK
    assert r.scrub(json.dumps({"v": 'qu"ote\\x'})) == '{"v": "' + MASK + '"}'
    assert r.scrub("url?x=a%20b%26c%3Dd and a+b%26c%3Dd") == f"url?x={MASK} and {MASK}"


def test_scrub_obj_recurses_and_structlog_processor():
    r = Redactor("tok-123456")
    obj = {"a": ["x tok-123456", ("tok-123456", 3)], "tok-123456": {"n": None, "env": EnvMap({"K": "tok-123456"})}}
    out = r.scrub_obj(obj)
    assert "tok-123456" not in repr(out)
    assert out["a"][1][1] == 3 and isinstance(out[MASK]["env"], EnvMap)

    class Leaky:
        def __repr__(self):
            return "Leaky(tok-123456)"

    assert r.scrub_obj(Leaky()) == f"Leaky({MASK})"
    processor = r.structlog_processor()
    assert processor(None, "info", {"event": "sent tok-123456", "n": 1}) == {"event": f"sent {MASK}", "n": 1}

