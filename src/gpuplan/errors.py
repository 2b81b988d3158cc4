"""Error types for requests gpuplan cannot answer: each names the field and the fix.

Exit codes of the CLI (documented in the README):

* 0: answered;
* 2: bad input (:class:`GpuplanError`): one line ``error: <field>: <what>; <fix>`` on stderr;
* 3: a valid request whose plan does not fit (:class:`DoesNotFit`): the fix is the smallest
  change found that does fit, checked by running the estimate again.

The library raises them and never prints; the CLI renders them.

A message or fix that names another input writes it as a field, in backticks: ```seq_len``` or
```seq_len=4096``` (``field_ref``), as a Python caller passes it. The CLI shows each as its flag
(``--seq-len 4096``: gpuplan/cli/flags.py), so the library never names a CLI flag.
"""

from __future__ import annotations

EXIT_BAD_INPUT = 2
EXIT_DOES_NOT_FIT = 3


class GpuplanError(ValueError):
    """Bad input or a request gpuplan cannot answer. ``field`` names what to change."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, field: str, message: str, fix: str | None = None):
        self.field = field
        self.message = message
        self.fix = fix
        text = f"{field}: {message}"
        if fix:
            text += f"; {fix}"
        super().__init__(text)

    def located(self, where: str) -> GpuplanError:
        """The same error with ``where`` (the file or run that holds the field) before its field,
        unless the field names it already."""
        if self.field.startswith(where):
            return self
        return type(self)(f"{where}: {self.field}", self.message, self.fix)


class DoesNotFit(GpuplanError):
    """The request is valid but the plan does not fit in GPU memory (exit code 3, not 2): a script
    can tell a typo from a model that needs more GPUs."""

    exit_code = EXIT_DOES_NOT_FIT


def field_ref(field: str, value: object = None) -> str:
    """A field named inside a message or a fix: ```field``` or ```field=value``` (module docstring)."""
    return f"`{field}`" if value is None else f"`{field}={value}`"


def require(condition: bool, field: str, message: str, fix: str | None = None) -> None:
    """Raise :class:`GpuplanError` unless ``condition`` holds."""
    if not condition:
        raise GpuplanError(field, message, fix)
