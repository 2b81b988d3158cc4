"""One error type for every bad input: it names the field and the fix.

The CLI prints ``str(error)`` on one line and exits with code 2; the library raises it so that
callers can catch a single exception type.
"""

from __future__ import annotations


class GpuplanError(ValueError):
    """Bad input or a request gpuplan cannot answer. ``field`` names what to change."""

    def __init__(self, field: str, message: str, fix: str | None = None):
        self.field = field
        self.message = message
        self.fix = fix
        text = f"{field}: {message}"
        if fix:
            text += f"; {fix}"
        super().__init__(text)


def require(condition: bool, field: str, message: str, fix: str | None = None) -> None:
    """Raise :class:`GpuplanError` unless ``condition`` holds."""
    if not condition:
        raise GpuplanError(field, message, fix)
