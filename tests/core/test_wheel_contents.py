"""The image's contents without a Docker engine (issue 22): build the wheel exactly as the
Dockerfile's build stage does, from exactly the files that stage copies, and check what the image
would run: the `orchestrate` entry point, the runbooks from the top-level `runbooks/`, the web
page's static files, the simulator and every module of both packages. The image's other promises
(HEALTHCHECK, EXPOSE, VOLUME, a network bind, the lock) are read from the Dockerfile itself.
.ci/smoke-wheel installs the same wheel into a fresh venv and runs it from outside the checkout.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def build_stage() -> tuple[list[str], str]:
    """(sources the build stage COPYs, its RUN command)."""
    stage = DOCKERFILE.split("FROM ")[1]
    copies = []
    for line in stage.splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            copies.extend(line.split()[1:-1])
    [run] = [line[4:] for line in stage.splitlines() if line.startswith("RUN ")]
    return copies, run


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    copies, run = build_stage()
    assert run.startswith("pip wheel --no-deps --wheel-dir /dist"), run
    src = tmp_path_factory.mktemp("src")
    for name in copies:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(path, src / name)
    dist = tmp_path_factory.mktemp("dist")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(dist), str(src)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    [whl] = dist.glob("orchestrator-*.whl")
    return zipfile.ZipFile(whl)


def names(wheel: zipfile.ZipFile) -> set[str]:
    return set(wheel.namelist())


def test_the_entry_point_is_orchestrate(wheel):
    [ep] = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(ep).decode()
    assert re.search(r"^\[console_scripts\]\s*\norchestrate = orchestrator\.cli:main$", text, re.M), text


def test_the_runbooks_are_the_top_level_ones_byte_for_byte(wheel):
    shipped = {Path(n).name: wheel.read(n) for n in wheel.namelist() if n.startswith("orchestrator/runbooks/")}
    source = {p.name: p.read_bytes() for p in (ROOT / "runbooks").glob("*.yaml")}
    assert source and shipped == source


def test_static_files_and_the_simulator_are_in_it(wheel):
    have = names(wheel)
    static = {f"orchestrator/teamserver/static/{p.name}" for p in (ROOT / "orchestrator" / "teamserver" / "static").iterdir()}
    assert static and static <= have
    sim = {p.relative_to(ROOT).as_posix() for p in (ROOT / "orchestrator_sim").rglob("*")
           if p.is_file() and p.suffix in (".py", ".yaml")}
    assert "orchestrator_sim/compose/prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml" in sim
    assert sim - have == set()


def test_every_module_of_the_package_is_in_it(wheel):
    """pyproject lists the packages (the runbooks' mapping needs it): a new one left out fails here."""
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "orchestrator").rglob("*.py")}
    assert modules - names(wheel) == set()
    assert "orchestrator/teamserver/healthcheck.py" in modules


def test_the_dockerfile_serves_reachably_and_healthily():
    final = DOCKERFILE.split("FROM ")[-1]
    assert re.search(r"^HEALTHCHECK .*CMD \[\"python\", \"-m\", \"orchestrator\.teamserver\.healthcheck\"\]$", final, re.M)
    assert re.search(r"^EXPOSE 8000$", final, re.M)
    assert re.search(r'^VOLUME \["/state"\]$', final, re.M) and "ORCHESTRATOR_STATE_DIR=/state" in final
    assert "ORCHESTRATOR_SERVER_BIND=0.0.0.0" in final and "ORCHESTRATOR_SERVER_PORT=8000" in final
    assert "pip install --constraint /tmp/requirements.lock /tmp/dist/orchestrator-*.whl" in final
    assert "COPY requirements.lock" in final


def test_the_lock_pins_every_dependency_pyproject_names():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["test"]
    pinned = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", (ROOT / "requirements.lock").read_text(), re.M))
    canon = {re.sub(r"[-_.]+", "-", k).lower() for k in pinned}
    missing = [d for d in wanted if re.sub(r"[-_.]+", "-", re.split(r"[\[<>=!~ ;]", d)[0]).lower() not in canon]
    assert missing == [], f"requirements.lock lacks {missing}: run `make lock`"


def test_the_example_inventory_is_the_checkouts_placeholder_byte_for_byte(wheel):
    assert wheel.read("orchestrator/examples/hosts.yaml") == (ROOT / "config" / "hosts.yaml").read_bytes()
