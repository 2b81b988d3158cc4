"""Run the CLI in-process as a user would: (exit code, stdout, stderr)."""

from gpuplan.cli.app import main


def run(args, capsys):
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err
