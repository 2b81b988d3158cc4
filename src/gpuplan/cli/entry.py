"""The entry point: run the app, and map what goes wrong to one line and an exit code.

Exit codes: 0 answered; 2 bad input, as one line ``error: <field>: <what>; <fix>`` on stderr and
never a traceback; 3 a valid request whose plan does not fit (train, serve, search), with the
smallest change found that does fit; under ``--json`` stdout then holds a document with
``"fits": false`` (the command's own, or ``error``: the field, message and fix), so a script that
sweeps configurations reads every answer as JSON.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import typer

from gpuplan.cli.output import ARGS, EMITTED, emit_json
from gpuplan.errors import DoesNotFit, GpuplanError

# Old flag names that still work, and the name every command now shares
DEPRECATED = {"--tpot-slo": "--itl-slo", "--cost": "--checkpoint-cost"}


@functools.lru_cache(maxsize=1)
def click_command() -> Any:
    """The click command typer builds from ``app``, built once: building it costs more than a
    train estimate, and ``gpuplan ui`` runs a command per request."""
    from gpuplan.cli.app import app

    return typer.main.get_command(app)


def empty_flag_values(head: list[str]) -> None:
    """Refuse ``--engine ''`` or ``--out=``: an empty value would read as the flag left out (the
    default engine, no output file) and the user would never learn that what they typed was
    ignored."""
    for i, a in enumerate(head):
        if not a.startswith("--") or a == "--":
            continue
        name, eq, value = a.partition("=")
        if (eq and not value.strip()) or (not eq and i + 1 < len(head) and not head[i + 1].strip()):
            raise GpuplanError(name, "is given an empty value", "give a value or leave the flag out")


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; bad input is one line and exit code 2, a plan that does not fit 3."""
    command = click_command()
    args = sys.argv[1:] if argv is None else list(argv)
    ARGS[:] = args
    head = args[: args.index("--")] if "--" in args else args  # slurm: what follows -- is the user's command
    # Said after an answer only, so that an error stays the single line on stderr
    notes = [
        f"note: {old} is now {DEPRECATED[old]} (the old name still works)\n"
        for old in dict.fromkeys(a.split("=")[0] for a in head if a.split("=")[0] in DEPRECATED)
    ]
    EMITTED[0] = False
    try:
        empty_flag_values(head)
        code = command.main(args=args, prog_name="gpuplan", standalone_mode=False)
    except GpuplanError as exc:
        from gpuplan.cli.flags import as_flags  # the library names fields; the CLI shows its flags

        if isinstance(exc, DoesNotFit) and "--json" in head and not EMITTED[0]:
            fix = as_flags(" ".join(exc.fix.split())) if exc.fix else None
            emit_json({"fits": False, "error": {"field": exc.field, "message": as_flags(exc.message), "fix": fix}})
        sys.stdout.flush()
        sys.stderr.write(f"error: {as_flags(' '.join(str(exc).split()))}\n")
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        sys.stderr.write("error: interrupted\n")
        sys.exit(130)
    except BrokenPipeError:
        # `gpuplan models | head`: the reader left; nothing more to say
        sys.stderr.close()
        sys.exit(0)
    except Exception as exc:
        # Usage errors (unknown flag, bad value, missing argument) come from the click that typer
        # bundles; recognise them by their interface rather than a private module path.
        if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
            raise
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:
            # `gpuplan` (or `gpuplan cluster`) alone: the help, formatted, is the answer
            sys.stdout.write(ctx.get_help() + "\n")
            sys.exit(0)
        message = " ".join(exc.format_message().split())
        sub = [a for a in args[:2] if not a.startswith("-")]
        if sub and sub[0] not in command.commands:
            sub = []
        # a cluster subcommand's help only when the subcommand exists (`gpuplan cluster bogus`)
        group = command.commands[sub[0]] if sub else None
        sub = sub if len(sub) == 2 and sub[1] in (getattr(group, "commands", None) or {}) else sub[:1]
        sys.stderr.write(f"error: {message.rstrip('.')}; see `{' '.join(['gpuplan', *sub, '--help'])}`\n")
        sys.exit(2)
    if isinstance(code, int) and code:  # typer.Exit(n) comes back as a return value without standalone mode
        sys.exit(code)
    sys.stdout.flush()
    sys.stderr.write("".join(notes))
