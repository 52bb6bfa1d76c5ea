"""`python -m capgeo` and the `capgeo` script: the command line, with Ctrl-C during start-up handled."""

import sys


def run() -> None:
    # the imports take a moment (click, the command's module): Ctrl-C there is the user's too,
    # and ends like Ctrl-C anywhere else, not with a traceback from inside an import
    try:
        from capgeo.cli import main
    except KeyboardInterrupt:
        sys.stderr.write("Interrupted.\n")
        sys.exit(130)
    main()


if __name__ == "__main__":
    run()
