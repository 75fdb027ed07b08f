from orchestrator.hosts.envmap import EnvMap
from orchestrator.hosts.redaction import Redactor


def test_credentials_and_long_values_are_hidden_labels_and_paths_survive():
    env = EnvMap({"PROXY_TOKEN": "tok-abcdef", "HF_API_KEY": "hfkey", "DB_PASSWORD": "hunter22",
                  "SOME_OPAQUE": "x" * 16, "ENV": "prod", "CVM_NAME": "gpu02", "LONG_TIER_ONLY": "true"})
    assert env.redaction_values() == {"tok-abcdef", "hfkey", "hunter22", "x" * 16}
    r = Redactor()
    r.add(*env.redaction_values())
    text = "up prod/GLM.yaml on gpu02 with tok-abcdef and hunter22 (LONG_TIER_ONLY true)"
    assert r.scrub(text) == "up prod/GLM.yaml on gpu02 with *** and *** (LONG_TIER_ONLY true)"
    assert "prod" not in repr(env) and "tok-abcdef" not in str(env)
