"""Fixtures shared by the journal, server and end-to-end tests: the real PostgreSQL server.

PostgreSQL: ORCHESTRATOR_TEST_POSTGRES_URL if set, else postgresql://postgres@127.0.0.1:5432/test,
else the same as user root. Unreachable -> the PostgreSQL tests are skipped with the connection
errors as the reason; with ORCHESTRATOR_REQUIRE_POSTGRES=1 (as .ci/run sets) they fail instead.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

# A property holds or not whatever the machine's load: hypothesis's per-example deadline (200 ms)
# and its too-slow health check are timings, which fail on a loaded 2-core machine and say nothing
# about the product. Speed goals live in bench/.
settings.register_profile("orchestrator", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("orchestrator")

#: docker's log rotation in every simulator a test starts: `--sim-log-lines N` sets it for the
#: whole run, in-process (SimConfig's default) and in subprocesses (inherited); `make test-short-logs`.
SIM_LOG_LINES_ENV = "ORCHESTRATOR_SIM_LOG_LINES"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--sim-log-lines", type=int, default=None, metavar="N",
                     help="every simulated engine keeps only its last N log lines (sets ORCHESTRATOR_SIM_LOG_LINES)")


def pytest_configure(config: pytest.Config) -> None:
    n = config.getoption("--sim-log-lines", default=None)
    if n is not None:
        if n < 1:
            raise pytest.UsageError(f"--sim-log-lines must be a positive number of lines, not {n}")
        os.environ[SIM_LOG_LINES_ENV] = str(n)


def pytest_report_header(config: pytest.Config) -> str | None:
    n = os.environ.get(SIM_LOG_LINES_ENV)
    return f"simulated engines keep their last {n} log lines ({SIM_LOG_LINES_ENV})" if n else None


@pytest.fixture(autouse=True)
def _isolated_xdg(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads or writes the real ~/.local/state/orchestrator or ~/.config/orchestrator:
    the XDG defaults (settings.py) point into a fresh directory. Subprocesses inherit this
    environment; tests that want a particular journal still set ORCHESTRATOR_STATE_DIR."""
    root = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_STATE_HOME", str(root / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(root / "config"))


PG_CANDIDATES = (
    "postgresql://postgres@127.0.0.1:5432/test",
    "postgresql://root@127.0.0.1:5432/test",
)


def require_postgres() -> bool:
    return os.environ.get("ORCHESTRATOR_REQUIRE_POSTGRES") == "1"


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """A reachable PostgreSQL URL, or a visible skip (a failure with ORCHESTRATOR_REQUIRE_POSTGRES=1)."""
    import psycopg

    env_url = os.environ.get("ORCHESTRATOR_TEST_POSTGRES_URL")
    errors = []
    for url in (env_url,) if env_url else PG_CANDIDATES:
        try:
            # a safety net, not a measure: a loaded machine's local server may take seconds to answer
            with psycopg.connect(url, connect_timeout=15, autocommit=True) as conn:
                conn.execute("SELECT 1")
            return url
        except psycopg.Error as exc:
            errors.append(f"{url}: {str(exc).strip()}")
    reason = "PostgreSQL unreachable: " + " | ".join(errors)
    if require_postgres():
        pytest.fail(reason + " (ORCHESTRATOR_REQUIRE_POSTGRES=1)")
    pytest.skip(reason)


@pytest.fixture
def pg_schema(postgres_url: str) -> Iterator[str]:
    """A fresh, empty schema; dropped (with everything in it) after the test."""
    import psycopg
    from psycopg import sql

    name = f"test_{secrets.token_hex(6)}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def pg_journal_url(postgres_url: str, pg_schema: str) -> str:
    """A journal URL whose search_path is a fresh schema."""
    sep = "&" if "?" in postgres_url else "?"
    return f"{postgres_url}{sep}options=-csearch_path%3D{pg_schema}"
