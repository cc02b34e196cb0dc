"""The small error hierarchy of rlguard.

Every error that reaches a user names where the problem is (file, line, field) and,
where there is a fixed set of valid choices, lists them.
"""
from __future__ import annotations


class RLGuardError(Exception):
    """Base class: anything rlguard raises on purpose."""


class InputError(RLGuardError):
    """Unusable input: a log, rule or state file that cannot be read as asked.

    ``str(err)`` is ``path:line: field: message`` with the parts that are known.
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        self.message = message
        self.path = path
        self.line = line
        self.field = field
        super().__init__(self.__str__())

    def __str__(self) -> str:  # noqa: D105
        where = ""
        if self.path:
            where = str(self.path)
            if self.line:
                where += f":{self.line}"
            where += ": "
        field = f"{self.field}: " if self.field else ""
        return f"{where}{field}{self.message}"


class LogFormatError(InputError):
    """A training log that cannot be parsed in the requested or detected format."""


class RuleError(InputError):
    """A rule pack, alias table or rule test that does not validate."""


class StateError(InputError):
    """A saved watchdog state that cannot be restored (wrong version, corrupt)."""
