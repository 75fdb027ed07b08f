import pytest

from orchestrator.hosts.parsers.dry_run import container_service, parse_dry_run


def blocks(text: str) -> dict[str, list[str]]:
    """The sample's blocks, keyed by the source named in each `## ` header (comments dropped)."""
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = line[3:]
            out[current] = []
        elif line.startswith("#") or not line.strip():
            continue
        elif current is not None:
            out[current].append(line)
    return out


def block(sample, marker: str) -> list[str]:
    found = [lines for header, lines in blocks(sample("compose-dry-run.txt")).items() if marker in header]
    assert len(found) == 1, marker
    return found[0]


def test_whole_sample_has_no_unknown_lines(sample):
    lines = sample("compose-dry-run.txt").splitlines()
    plan = parse_dry_run(lines, project="nginx-golang-mysql")
    assert plan.unknown_lines == []
    assert len(plan.lines) == len(lines)


def test_up_build_block(sample):
    plan = parse_dry_run(block(sample, "#10529"), project="nginx-golang-mysql")
    assert plan.actions == {"db": "unchanged", "backend": "recreated"}
    assert plan.unknown_lines == []


def test_up_fresh_project_block(sample):
    plan = parse_dry_run(block(sample, "#10533"), project="nginx-golang-mysql")
    assert plan.actions == {"db": "created", "backend": "created", "proxy": "created"}
    assert plan.unknown_lines == []  # `Network nginx-golang-mysql_default  Created` is understood, not a service


def test_down_block_removes(sample):
    plan = parse_dry_run(block(sample, "#10444"), project="nginx-golang-mysql")
    # the one-off `proxy-run-<hex>` container belongs to service proxy
    assert plan.actions == {"proxy": "removed", "backend": "removed", "db": "removed"}


def test_compose_v1_names_block(sample):
    plan = parse_dry_run(block(sample, "python-on-whales"), project="nb_development")
    assert plan.actions == {"postgresql": "recreated", "redis-cache": "recreated"}


def test_image_lines_block_is_ignored(sample):
    plan = parse_dry_run(block(sample, "#13042"))
    assert plan.actions == {} and plan.unknown_lines == []


def test_container_name_is_the_service_without_project_or_when_prefix_absent():
    line = " ✔ DRY-RUN MODE -  Container model-sg-glm53-w4afp8-tp4-r2  Created  0.0s"
    assert parse_dry_run([line]).actions == {"model-sg-glm53-w4afp8-tp4-r2": "created"}
    assert parse_dry_run([line], project="work").actions == {"model-sg-glm53-w4afp8-tp4-r2": "created"}
    assert container_service("work-nginx-1", "work") == "nginx"
    assert container_service("model-sg-glm53-w4afp8-tp4-r1", "work") == "model-sg-glm53-w4afp8-tp4-r1"


def test_orphan_removal_hazard_line_from_the_runbook():
    lines = [
        " ✔ DRY-RUN MODE -  Container model-downloader  Exited  0.0s",
        " ✔ DRY-RUN MODE -  Container model-sg-glm53-w4afp8-tp4-r1  Recreated  0.0s",
        " ✔ DRY-RUN MODE -  Container model-sg-glm53-w4afp8-tp4-r2  Removed  0.0s",
    ]
    plan = parse_dry_run(lines, project="work")
    assert plan.actions["model-sg-glm53-w4afp8-tp4-r2"] == "removed"
    assert plan.actions["model-downloader"] == "unchanged"


@pytest.mark.parametrize(
    "status, action",
    [("Created", "created"), ("Recreated", "recreated"), ("Recreate", "recreated"), ("Started", "started"),
     ("Starting", "started"), ("Running", "unchanged"), ("Healthy", "unchanged"), ("Waiting", "unchanged"),
     ("Removed", "removed"), ("Stopped", "removed"), ("Removing", "removed"), ("Stopping", "removed")],
)
def test_status_mapping(status, action):
    assert parse_dry_run([f" ✔ DRY-RUN MODE -  Container nginx  {status}"]).actions == {"nginx": action}


def test_strongest_action_wins():
    lines = [f" ✔ DRY-RUN MODE -  Container nginx  {s}  0.0s" for s in ("Recreate", "Recreated", "Started", "Running")]
    assert parse_dry_run(lines).actions == {"nginx": "recreated"}
    lines += [" ✔ DRY-RUN MODE -  Container nginx  Stopped  0.0s"]
    assert parse_dry_run(lines).actions == {"nginx": "removed"}
    lines = [" ✔ DRY-RUN MODE -  Container nginx  Started", " ✔ DRY-RUN MODE -  Container nginx  Created"]
    assert parse_dry_run(lines).actions == {"nginx": "created"}


def test_unknown_lines_are_reported():
    lines = [
        "[+] Running 3/3",
        " ✔ DRY-RUN MODE -  Container nginx  Exploded  0.0s",
        " ✘ DRY-RUN MODE -  something we never saw",
        " ✔ Container proxy-glm53  Recreated  1.2s",  # no DRY-RUN mark: maybe real (compose#14029)
        "Error response from daemon: nothing",  # not a plan line: left to the stream's success flag
    ]
    plan = parse_dry_run(lines)
    assert plan.unknown_lines == lines[1:4]
    assert plan.actions == {}
