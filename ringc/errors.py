"""The one error type for bad input: it always knows the file and line, and says what to change."""

from __future__ import annotations


class ScheduleError(Exception):
    """A schedule that cannot be loaded, resolved or unrolled. CLI exit code 2."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line
        self.fix = fix

    def __str__(self) -> str:
        where = self.file or "<schedule>"
        if self.line:
            where += f":{self.line}"
        text = f"{where}: error: {self.message}"
        if self.fix:
            text += f"\n  fix: {self.fix}"
        return text


class LimitError(ScheduleError):
    """An input past one of ringc's limits (`limits.check`): which limit, and the amount that
    would pass it (`--limit NAME=AMOUNT`)."""

    def __init__(self, message: str, *, limit: str, amount: int | float, **where):
        super().__init__(message, **where)
        self.limit = limit
        self.amount = amount
