"""`python -m capgeo` and the `capgeo` script: the command line, with Ctrl-C during start-up handled."""

import gc
import os
import signal
import sys


#: the command line's collection thresholds (Python's are 700, 10, 10): young collections every 700
#: new objects, as numpy's, polars' and the result's pile up, cost 30-40 ms of a 0.6 s profile and
#: find almost nothing to free in a process that ends when its one command does (mypy's choice)
COLLECTION_THRESHOLDS = (200_000, 30, 30)


def run() -> None:
    # only the command line: a library caller's process keeps its own thresholds
    gc.set_threshold(*COLLECTION_THRESHOLDS)
    # the imports take a moment (click, the command's module): Ctrl-C there is the user's too,
    # and ends like Ctrl-C anywhere else, not with a traceback from inside an import
    try:
        from capgeo.cli import main, output_write_failure
    except KeyboardInterrupt:
        sys.stderr.write("Interrupted.\n")
        sys.exit(130)
    try:
        main()
    except SystemExit as ended:
        # the command is over and its files are closed: what is left is the interpreter's own exit,
        # whose garbage collections walk every object of numpy, polars and the result (0.1-0.2 s of
        # a 1 s profile). Frozen objects are outside those collections; atexit handlers, thread
        # joins and flushing still run, and the operating system frees the memory.
        gc.freeze()
        if ended.code in (130, 143):
            # "Interrupted." is printed; a second Ctrl-C while the interpreter frees large arrays and
            # runs torch's exit handlers (1-3 s) printed a traceback after it. The command is over.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise
    except OSError as error:
        # the commands turn a failed write into one line themselves; --help and --version are printed
        # by click before any command runs
        line = output_write_failure(error)
        if line is None:
            raise
        sys.stderr.write(line + "\n")
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        sys.exit(2)


if __name__ == "__main__":
    run()
