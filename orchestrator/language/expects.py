"""`expects:` in a runbook (docs/runbook-language.md): the part of the new compose file's contract a
procedure depends on that no gate or declared value states (argv flags, environment, values the file
must not have). `plan --compose-file` and `ci-preview` compare each entry with the file as compose
would run it, and fail the pull request with one line per difference.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from orchestrator.language.step_specs import _Strict

REPLICA_PREFIX = "replica:"


class Expectation(_Strict):
    services: list[str] = Field(min_length=1)
    argv: dict[str, str | bool] = Field(default_factory=lambda: {})
    distinct: list[str] = Field(default_factory=lambda: [])
    environment: dict[str, str | None] = Field(default_factory=lambda: {})
    environment_absent: list[str] = Field(default_factory=lambda: [])
    configs_contain: list[str] = Field(default_factory=lambda: [])
    image: str | None = None
    #: why the procedure needs it (shown with every problem this entry finds)
    why: str = Field(min_length=1)
    #: the id of the step that relies on it (the problem line cites that step); else this entry
    relied_on_by: str | None = None

    @field_validator("argv", mode="before")
    @classmethod
    def _flags(cls, v: object) -> object:
        if isinstance(v, dict):
            for flag, value in v.items():
                if not str(flag).startswith("-"):
                    raise ValueError(f"argv: {flag!r} is not a flag (flags start with -)")
                if isinstance(value, int | float) and not isinstance(value, bool):
                    raise ValueError(f"argv: {flag}: quote the value ({value!r} -> \"{value}\"): argv is text")
        return v

    @field_validator("environment", mode="before")
    @classmethod
    def _texts(cls, v: object) -> object:
        if isinstance(v, dict):
            for name, value in v.items():
                if isinstance(value, int | float | bool):
                    raise ValueError(f"environment: {name}: quote the value ({value!r}): the environment is text")
        return v

    def check_against(self, here: str, replicas: dict[str, list[str]]) -> None:
        """The rules that need the runbook: the replicas it names exist. (`relied_on_by` naming no
        step is the compose-file check's problem, not the loader's: a runbook derived from another
        with fewer steps still loads, and the check says which entry cites nothing.)"""
        for s in self.services:
            if s.startswith(REPLICA_PREFIX) and s[len(REPLICA_PREFIX):] not in replicas:
                raise ValueError(f"{here}.services: {s!r} names no replica of replicas: ({', '.join(replicas) or 'none'})")
        if not (self.argv or self.distinct or self.environment or self.environment_absent or self.configs_contain or self.image):
            raise ValueError(f"{here}: an expectation needs argv, distinct, environment, environment_absent, "
                             f"configs_contain or image (it would check nothing)")
        if self.distinct and len(self.services) < 2 and not any(s.startswith(REPLICA_PREFIX) for s in self.services):
            raise ValueError(f"{here}.distinct: values differ between several services: list more than one")
