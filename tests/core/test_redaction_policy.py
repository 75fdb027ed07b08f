"""Which env-map values are secrets (`EnvMap.redaction_values`, orchestrator/hosts/envmap.py): by
what they are -- a credential key, a declared key, a token's shape, a URL's password -- never
because a key merely contains AUTH, KEY, PASS, TOKEN or CERT; never a common word, a number, a
short value, or a value that is part of the host's own identifiers.

Mutation list (each guard was disabled in the source, the test run and seen failing, the source
restored):
- `is_credential_key`: the last-word rule removed -> test_a_credential_key_is_a_secret_whatever_its_value_looks_like;
  the last-two-words rule removed -> same test (`WEB_CONTEXT_SEARCH_API_KEY`); `NAMED_CREDENTIALS`
  emptied -> same test (`PGPASSWORD`); `declared` ignored -> test_declared_secret_keys_*;
  the rule turned back into a substring search -> test_labels_whose_keys_merely_contain_*.
- `looks_like_secret`: each of the entropy, the digit-and-letter, the class-change, the UUID,
  the digest and the `://` checks removed -> test_shape_guards_each_keep_a_value_that_is_not_a_token
  (its parameter names the guard); `SHAPE_MIN_RUN` 12 -> 0 -> test_identifiers_are_not_tokens_by_shape.
- `is_plain_value`: the length, the no-letter, the common-word and the placeholder checks each
  removed -> test_a_credential_keys_plain_value_is_never_a_secret (its parameter names it).
- `redaction_values`: the `identifiers` filter removed -> test_a_value_inside_the_hosts_own_identifiers_*;
  `url_password` not added -> test_the_password_of_a_url_with_credentials_is_a_secret.
- `masked_credentials`: `_is_mask` for any key removed -> test_masked_credentials_*.
- `HostEntry._env_key_names` (inventory.py) not raising -> test_the_inventory_declares_secret_keys_per_host.
"""

from __future__ import annotations

import json
import random
import string

import pytest

from orchestrator.hosts.envmap import EnvMap, is_credential_key, looks_like_secret
from orchestrator.hosts.redaction import Redactor

HF = "hf_E35EnITNjH0v6Dgvw7S6gakr8jARkwcvGX"
OPAQUE = "Zq9Xw2Lk7Pm4Rt8Vb1Nc6Hj3Gf5Ds0Ae"
FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-Canary.yaml"


def test_labels_whose_keys_merely_contain_auth_key_pass_token_or_cert_are_not_secrets():
    env = EnvMap({
        "AUTH_ENV": "prod", "AUTH_ENABLED": "true", "KEYCLOAK_REALM": "nearai-internal",
        "PASSTHROUGH": "model-proxy-passthrough", "TOKENIZERS_PARALLELISM": "false",
        "SSL_CERT_DIR": "/etc/ssl/certs", "TOKEN_FILE": "/run/secrets/hf-token-file",
        "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE", "HUGGING_FACE_HUB_TOKEN": HF,
    })
    assert env.redaction_values() == {HF}
    r = Redactor(*env.redaction_values())
    line = f"up {FILE} (auth env prod, parallelism false, certs /etc/ssl/certs) with {HF}"
    assert r.scrub(line) == f"up {FILE} (auth env prod, parallelism false, certs /etc/ssl/certs) with ***"


@pytest.mark.parametrize("key", [
    "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN", "PROXY_TOKEN", "MODEL_PROXY_TOKEN", "FUSION_INTERNAL_BEARER_TOKEN",
    "CLIENT_SECRET", "DB_PASSWORD", "WEB_CONTEXT_SEARCH_API_KEY", "AWS_SECRET_ACCESS_KEY", "PGPASSWORD",
    "MYSQL_PWD", "TOKEN", "hf_token",
])
def test_a_credential_key_is_a_secret_whatever_its_value_looks_like(key):
    """`pw-Zq9-unique` has no token shape: only the key makes it a secret."""
    assert not looks_like_secret("pw-Zq9-unique")
    assert is_credential_key(key)
    assert EnvMap({key: "pw-Zq9-unique"}).redaction_values() == {"pw-Zq9-unique"}


@pytest.mark.parametrize("key", ["AUTH_ENV", "KEYCLOAK_REALM", "PASSTHROUGH", "TOKENIZERS_PARALLELISM",
                                 "SSL_CERT_DIR", "TOKEN_FILE", "API_KEY_ID", "PWD", "SECRETARY", "MY_TOKENIZER"])
def test_a_key_that_only_contains_a_credential_word_is_not_a_credential(key):
    assert not is_credential_key(key)
    assert EnvMap({key: "pw-Zq9-unique"}).redaction_values() == frozenset()


def test_declared_secret_keys_make_their_values_secrets():
    env = EnvMap({"MY_DB_CREDS": "pw-Zq9-unique", "ENV": "prod"})
    assert env.redaction_values() == frozenset()
    assert env.redaction_values(secret_keys=["MY_DB_CREDS"]) == {"pw-Zq9-unique"}
    assert env.masked_credentials(secret_keys=["MY_DB_CREDS"]) == []
    assert EnvMap({"MY_DB_CREDS": ""}).masked_credentials(secret_keys=["MY_DB_CREDS"]) == ["MY_DB_CREDS"]


@pytest.mark.parametrize("value", ["prod", "true", "false", "hfkey", "12345678", "10.0.0.2:8000", "Disabled",
                                   "changeme", "  none  "],
                         ids=["common-prod", "common-true", "common-false", "short", "number", "address",
                              "common-case", "placeholder", "padded"])
def test_a_credential_keys_plain_value_is_never_a_secret(value):
    assert EnvMap({"HF_TOKEN": value}).redaction_values() == frozenset()


RNG = random.Random(36)


def _random(alphabet: str, n: int) -> str:
    return "".join(RNG.choice(alphabet) for _ in range(n))


TOKENS = {
    "hf": HF,
    "hex32": "8edab9f108b8512f26e930b234286d47",
    "base62": OPAQUE,
    "base64": "c5g2+lq2QwHeL0/htGPoJzZ8M4jt7YuX+Xcto+hJ",
    "base64url": "RULrok1tmrutZrjLsrWcgMuSBQlxFpRS0ppat3ii_UI",
    "openai": "sk-proj-R3yg3xqvJHnhd10zWP9-FNVpESc9NBT5DqMn7FAd",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "sim-token": "kD8fQ2mZ7xLw3RvN9cTg4HbY6pJs1AeUoWq5iK0tFzXyVnMl",
}

IDENTIFIERS = [
    FILE, "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml", "/models/GLM-5.3-Flash-SGL-TP4-W4AFP8",
    "model-sg-glm53-w4afp8-tp4-r1", "z-ai/glm-5.3-flash", "nvidia/Llama-3.1-Nemotron-70B-Instruct-HF",
    "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "lmsysorg/sglang:v0.4.6.post1-cu124",
    "glm-5-3-flash.long.inference.example.com", "https://web-context.near.ai/v1/search",
    "expandable_segments:True", "/root/.cache/huggingface/hub", "h200-gpu02-prod-us-east-1",
    "--mem-fraction-static=0.88", "2024-09-23T10:11:12Z", "correcthorsebatterystaple",
    "a-sixteen-plus-label-value", "SGLANG_ENABLE_TORCH_COMPILE", "0,1,2,3,4,5,6,7",
    "nvidia/DeepSeek-R1-0528-fp8e4m3fn-w4a16g128",  # quantisation tags: short runs that change class often
]


@pytest.mark.parametrize("name", sorted(TOKENS))
def test_tokens_are_secrets_by_shape_under_any_key(name):
    assert looks_like_secret(TOKENS[name])
    assert EnvMap({"SOME_OPAQUE": TOKENS[name]}).redaction_values() == {TOKENS[name]}


@pytest.mark.parametrize("value", IDENTIFIERS)
def test_identifiers_are_not_tokens_by_shape(value):
    assert not looks_like_secret(value)


def test_random_tokens_are_secrets_by_shape_nearly_always():
    alnum = string.ascii_letters + string.digits
    b64 = string.ascii_letters + string.digits + "+/"
    draws = {
        "hex32": [_random("0123456789abcdef", 32) for _ in range(200)],
        "base62-32": [_random(alnum, 32) for _ in range(200)],
        "base64-40": [_random(b64, 40) for _ in range(200)],
        "base64url-43": [_random(b64.translate(str.maketrans("+/", "-_")), 43) for _ in range(200)],
    }
    for name, values in draws.items():
        assert sum(map(looks_like_secret, values)) >= 190, name


@pytest.mark.parametrize("value", [
    "a1a1a1a1a1b2b2b2b2b2",  # low entropy
    "abcdefghijklmnop1234",  # one class change: a word and a number
    "AbCdEfGhIjKlMnOpQrStUv",  # letters only
    "5ae2369d-6e6b-406c-9443-475f10fb2fb4",  # a UUID: an identifier
    "sha256:fa67c01f5d0816b69e62d2bd35328395f025d5bd29be4765d0ac5dac4f1a1586",  # a public digest
    "https://x.example/Zq9Xw2Lk7Pm4Rt8Vb1Nc6Hj3Gf5Ds0Ae",  # a URL
], ids=["entropy", "class-changes", "digit-and-letter", "uuid", "digest", "url"])
def test_shape_guards_each_keep_a_value_that_is_not_a_token(value):
    assert not looks_like_secret(value)
    assert EnvMap({"SOME_VALUE": value}).redaction_values() == frozenset()


def test_a_value_inside_the_hosts_own_identifiers_is_never_a_secret():
    commit = "8edab9f108b8512f26e930b234286d4712345678"
    env = EnvMap({"COMPOSE_COMMIT": commit, "HF_TOKEN": "GLM-5.3-Flash-SGL", "PROXY_TOKEN": OPAQUE})
    assert env.redaction_values() == {commit, "GLM-5.3-Flash-SGL", OPAQUE}
    own = ["gpu02", FILE, "v0.0.300", f"tag-{commit}", "model-sg-glm53-w4afp8-tp4-r1"]
    assert env.redaction_values(identifiers=own) == {OPAQUE}


def test_the_password_of_a_url_with_credentials_is_a_secret():
    env = EnvMap({"DATABASE_URL": "postgresql://orch:p%40ss-Word9@db.internal:5432/journal",
                  "SEARCH_URL": "https://web-context.near.ai/v1/search"})
    assert env.redaction_values() == {"p%40ss-Word9", "p@ss-Word9"}


def test_masked_credentials_any_key_with_a_mask_and_credential_keys_with_placeholders():
    env = EnvMap({"HF_TOKEN": "", "PROXY_TOKEN": "changeme", "ODD_NAME": "***", "OTHER": "<redacted>",
                  "SSL_CERT_DIR": "", "AUTH_ENABLED": "none", "TOKENIZERS_PARALLELISM": "false", "SEP": "."})
    assert env.masked_credentials() == ["HF_TOKEN", "ODD_NAME", "OTHER", "PROXY_TOKEN"]


def test_redaction_hides_credentials_and_tokens_and_keeps_labels_and_paths():
    env = EnvMap({"PROXY_TOKEN": "tok-abcdef", "DB_PASSWORD": "hunter22", "SOME_OPAQUE": OPAQUE,
                  "ENV": "prod", "CVM_NAME": "gpu02", "LONG_TIER_ONLY": "true", "X": "x" * 16})
    assert env.redaction_values() == {"tok-abcdef", "hunter22", OPAQUE}
    r = Redactor(*env.redaction_values())
    text = f"up prod/GLM.yaml on gpu02 with tok-abcdef, {OPAQUE} and hunter22 (LONG_TIER_ONLY true) {'x' * 16}"
    assert r.scrub(text) == f"up prod/GLM.yaml on gpu02 with ***, *** and *** (LONG_TIER_ONLY true) {'x' * 16}"
    assert "prod" not in repr(env) and "tok-abcdef" not in str(env)


def test_the_inventory_declares_secret_keys_per_host(tmp_path):
    from orchestrator.hosts.inventory import load_inventory
    from orchestrator.util.user_errors import UserError

    host = {"compose_manager_url": "http://cm.invalid", "instance_name": "gpu02", "model_proxy_address": "10.0.0.2:8000",
            "inference_endpoint": "http://inference.invalid", "soak_relay_base_url": "http://relay.invalid",
            "available_ram_gib": 1500, "available_ram_source": "test", "gpus": 8}
    doc = {"dashboard_url": "http://dash.invalid", "model_proxy_peers": {"a": "http://mp.invalid"}, "hosts": {"gpu02": host}}
    path = tmp_path / "hosts.yaml"
    path.write_text(json.dumps(doc))
    assert load_inventory(path).host("gpu02").secret_keys == ()
    path.write_text(json.dumps({**doc, "hosts": {"gpu02": {**host, "secret_keys": ["MY_DB_CREDS"]}}}))
    entry = load_inventory(path).host("gpu02")
    assert EnvMap({"MY_DB_CREDS": "pw-Zq9-unique"}).redaction_values(secret_keys=entry.secret_keys) == {"pw-Zq9-unique"}
    path.write_text(json.dumps({**doc, "hosts": {"gpu02": {**host, "secret_keys": ["MY DB"]}}}))
    with pytest.raises(UserError, match="secret_keys"):
        load_inventory(path)
