"""A compose file's values as ``docker compose`` interpolates them (docker cannot run here): ``${VAR}``,
``${VAR:-default}``, ``${VAR-default}``, ``${VAR:?message}``, ``${VAR?message}`` and ``$$``, against a given
environment; a required variable that is missing raises :class:`MissingVariable` with compose's message."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_VAR = re.compile(r"\$\$|\$\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}|\$(?P<bare>\w+)")


class MissingVariable(ValueError):
    """A ``${VAR:?message}`` whose variable is unset (or empty): compose refuses to start with ``message``."""


def interpolate(value: Any, environ: Mapping[str, str]) -> Any:
    """``value`` (a string, or lists and mappings of them) with every variable replaced as compose would."""
    if isinstance(value, dict):
        return {k: interpolate(v, environ) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, environ) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group("name") or m.group("bare")
        op, arg = m.group("op"), m.group("arg") or ""
        given = environ.get(name)
        unset = given is None or (op is not None and op.startswith(":") and given == "")
        if op in ("-", ":-"):
            return arg if unset else str(given)
        if op in ("?", ":?"):
            if unset:
                raise MissingVariable(f"required variable {name} is missing a value: {arg}")
            return str(given)
        return given or ""

    return _VAR.sub(one, value)
