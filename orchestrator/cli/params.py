"""typer (0.29) coerces every parameter through a pydantic TypeAdapter, built when a command is
parsed: importing pydantic and building the adapters is about a third of a read-only command's
start-up. The parameters here are plain `str`, `Path` and `list[str]`: each gets the coercion
typer's adapter would apply, without pydantic (`light`). Anything else (a float, a bool given a
value) keeps typer's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args, get_origin

from typer._coercion import RuntimeParam
from typer._param_types import coerce_cli_path


def _text(value: Any) -> str:
    """typer's `_parse_cli_str`, for what a command line gives (str; bytes decoded as typer does)."""
    if isinstance(value, bytes):
        import sys

        try:
            return value.decode(sys.getfilesystemencoding())
        except UnicodeError:
            return value.decode("utf-8", "replace")
    return str(value)


class _Str(RuntimeParam):
    def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
        return _text(value)


class _StrList(RuntimeParam):
    def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
        if not isinstance(value, (list, tuple)):
            value = [value]
        return [_text(v) for v in value]


class _Path(RuntimeParam):
    def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
        path = value if isinstance(value, Path) else Path(_text(value))
        return coerce_cli_path(path, self.parameter_info, path_type=Path, param=param, ctx=ctx)


_TRUE = {"true", "t", "yes", "y", "on", "1"}
_FALSE = {"false", "f", "no", "n", "off", "0"}


class _Bool(RuntimeParam):
    """A flag's value (a bool, or its default): as pydantic's bool would read it; anything else
    goes to typer's own coercion (its message for a bad value)."""

    def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            text = value.strip().lower()
            if text == "" or text in _FALSE:
                return False
            if text in _TRUE:
                return True
        from typer._coercion import build_runtime_param

        return build_runtime_param(param.type_descriptor)._coerce_value(value, param=param, ctx=ctx)


def _plain_path(info: Any) -> bool:
    return info.parser is None and info.path_type in (None, Path)


def _light_for(param: Any) -> RuntimeParam | None:
    desc = getattr(param, "type_descriptor", None) if param is not None else None
    if desc is None or desc.file_annotation is not None or getattr(param, "_runtime_param", 0) is not None:
        return None
    ann, info = desc.annotation, desc.parameter_info
    if info.parser is not None:
        return None
    if ann is bool:
        return _Bool(parameter_info=info, annotation=ann)
    if ann is str:
        return _Str(parameter_info=info, annotation=ann)
    if get_origin(ann) is list and get_args(ann) == (str,):
        return _StrList(parameter_info=info, annotation=ann)
    if ann is Path and _plain_path(info):
        return _Path(parameter_info=info, annotation=ann)
    return None


def light(cmd: Any) -> Any:
    """Give `cmd`'s plain parameters (and its subcommands') a coercion without pydantic."""
    for c in [cmd, *getattr(cmd, "commands", {}).values()]:
        for p in [*getattr(c, "params", ()), getattr(c, "_help_option", None)]:
            rt = _light_for(p)
            if rt is not None:
                p._runtime_param = rt
    return cmd
