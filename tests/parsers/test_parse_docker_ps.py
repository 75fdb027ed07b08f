import json

import pytest

from orchestrator.hosts.parsers import ParseError
from orchestrator.hosts.parsers.docker_ps import parse_docker_ps, parse_labels


def ps_line(**fields):
    base = {
        "ID": "abc123",
        "Names": "work-db-1",
        "Image": "redis:latest",
        "State": "running",
        "Status": "Up 2 hours",
        "CreatedAt": "2026-09-23 19:00:00 +0000 UTC",
        "Labels": "com.docker.compose.service=db,com.docker.compose.project=work",
    }
    base.update(fields)
    return json.dumps(base)


def test_real_sample_line(sample):
    [c] = parse_docker_ps(sample("docker-ps.jsonl"))
    assert c.id == "d2763e024a10"
    assert c.name == "test-docker-json-ps-db-1"
    assert c.image == "redis:latest"
    assert c.state == "running"
    assert c.status == "Up 2 minutes"
    assert c.created_at == "2024-05-02 12:21:53 +0400 +04"
    assert c.service == "db"
    assert c.project == "test-docker-json-ps"
    assert c.labels["com.docker.compose.depends_on"] == ""
    assert c.labels["com.docker.compose.version"] == "2.26.1"
    assert not c.restarting and c.is_running


@pytest.mark.parametrize("state", ["removing", "dead"])
def test_zombie_states(state):
    out = "\n".join([ps_line(), ps_line(ID="z1", Names="work-r2-1", State=state, Status="Removal In Progress",
                                        Labels="com.docker.compose.service=r2,com.docker.compose.project=work")])
    containers = parse_docker_ps(out)
    assert [c.id for c in containers if c.state in ("removing", "dead")] == ["z1"]
    assert containers[1].state == state and not containers[1].is_running
    assert containers[0].state not in ("removing", "dead")


def test_restarting_by_state_or_status():
    [a, b, c] = parse_docker_ps("\n".join([
        ps_line(ID="a", State="restarting", Status="Restarting (1) 5 seconds ago"),
        ps_line(ID="b", State="running", Status="Restarting (137) 1 second ago"),
        ps_line(ID="c", State="exited", Status="Exited (137) 3 minutes ago"),
    ]))
    assert a.restarting and b.restarting and not c.restarting
    assert not b.is_running


def test_names_list_blank_lines_and_label_values_with_commas():
    line = ps_line(
        Names="first,second",
        Labels="com.docker.compose.depends_on=model-downloader:service_completed_successfully:false,nginx:service_started:false,"
        "com.docker.compose.service=model-sg-glm53-w4afp8-tp4-r2,com.docker.compose.project=work",
    )
    [c] = parse_docker_ps(f"\n\n{line}\n   \n")
    assert c.name == "first"
    assert c.service == "model-sg-glm53-w4afp8-tp4-r2"
    assert c.labels["com.docker.compose.depends_on"] == (
        "model-downloader:service_completed_successfully:false,nginx:service_started:false"
    )


def test_container_without_compose_labels_has_no_service():
    [c] = parse_docker_ps(ps_line(Labels=""))
    assert c.service is None and c.project is None and c.labels == {}


def test_bad_line_raises_with_line_number():
    with pytest.raises(ParseError) as err:
        parse_docker_ps(ps_line() + "\n<html>oops</html>\n")
    assert str(err.value) == "line 2: not JSON"
    with pytest.raises(ParseError):
        parse_docker_ps(json.dumps({"Names": "no-id"}))


def test_json_array_line_is_accepted():
    out = json.dumps([json.loads(ps_line(ID="a")), json.loads(ps_line(ID="b"))])
    assert [c.id for c in parse_docker_ps(out)] == ["a", "b"]


def test_parse_labels_mapping_and_keys_without_values():
    assert parse_labels({"a": "1", "b": None}) == {"a": "1", "b": ""}
    assert parse_labels("lonely,k=v") == {"lonely": "", "k": "v"}


def test_line_cache_answers_a_changed_line_anew():
    """docker/ps lines are cached by their exact text: a line whose status changed (same ID) is parsed anew."""
    from orchestrator.hosts.parsers import docker_ps

    line = '{"ID":"abc","Names":"model-sg-r1","State":"running","Status":"Up 1 minute","Labels":"com.docker.compose.service=r1"}'
    first = docker_ps.parse_docker_ps(line + "\n")
    again = docker_ps.parse_docker_ps(line + "\n")
    assert again == first and again[0] is first[0]  # the cache answered
    changed = docker_ps.parse_docker_ps(line.replace("Up 1 minute", "Restarting (1) 2 seconds ago") + "\n")
    assert changed[0].status.startswith("Restarting") and changed[0].restarting
    for i in range(docker_ps._LINE_CACHE_SIZE + 5):  # bounded
        docker_ps.parse_docker_ps(line.replace("abc", f"id{i}"))
    assert len(docker_ps._LINE_CACHE) <= docker_ps._LINE_CACHE_SIZE


def test_line_cache_never_keeps_a_bad_line():
    from orchestrator.hosts.parsers import docker_ps

    for _ in range(2):
        with pytest.raises(ParseError):
            docker_ps.parse_docker_ps('{"Names":"no-id"}\n')
