"""The command line: a thin click shell over the library.

Each command lives in its own module and is imported only when it runs (or
when --help lists it), and each command module imports torch/open_clip only
inside its function body, so ``capgeo --help`` answers at once.
"""

from __future__ import annotations

import errno
import importlib
import os
import sys

import click

from capgeo import __version__
from capgeo.errors import CapgeoError
from capgeo.termination import received as termination_received
from capgeo.termination import terminate_like_interrupt, was_terminated

# command name -> "module:attribute"; order is the order in --help
COMMANDS = {
    "info": "capgeo.cli.info:info",
    "datasets": "capgeo.cli.info:datasets",
    "encoders": "capgeo.cli.encode:encoders",
    "encode": "capgeo.cli.encode:encode",
    "profile": "capgeo.cli.profile:profile",
    "dupes": "capgeo.cli.dupes:dupes",
    "dupes-examples": "capgeo.cli.dupes:dupes_examples",
    "dupes-sets": "capgeo.cli.dupes:dupes_sets",
    "leak": "capgeo.cli.leak:leak",
    "negatives": "capgeo.cli.negatives:negatives",
    "batches": "capgeo.cli.batches:batches",
    "gamma": "capgeo.cli.gamma:gamma",
    "truncation": "capgeo.cli.truncation:truncation",
    "report": "capgeo.cli.report:report",
    "compare": "capgeo.cli.report:compare",
    "map": "capgeo.cli.map:map_command",
    "docs": "capgeo.cli.docs:docs",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return list(COMMANDS)

    def get_command(self, ctx, name):
        target = COMMANDS.get(name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        return getattr(importlib.import_module(module_name), attribute)

    def invoke(self, ctx):
        termination_received.clear()  # a SIGTERM of an earlier command in this process is not this one's
        terminate_like_interrupt()
        _replace_what_the_terminal_cannot_encode()
        try:
            return super().invoke(ctx)
        except CapgeoError as error:
            # a user mistake: one line, no traceback
            click.echo(f"Error: {error}", err=True)
            ctx.exit(error.exit_code)
        except KeyboardInterrupt as interrupt:
            if was_terminated(interrupt):
                click.echo("Terminated.", err=True)
                ctx.exit(143)
            click.echo("Interrupted.", err=True)
            ctx.exit(130)
        except BrokenPipeError:
            # the reader went away (`| head`): the reader has what it asked for, so nothing is said,
            # and the status is 141 (128 + SIGPIPE), what the shell reports for a tool SIGPIPE ends
            # (`seq 1 1000000 | head`), so `set -o pipefail` sees capgeo as it sees coreutils. Stdout
            # goes to devnull first, so that the exit's own flush meets no closed pipe. rich's writes
            # end here too (capgeo.terminal.console), not in its own exit with status 1.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            ctx.exit(BROKEN_PIPE_STATUS)
        except OSError as error:
            line = output_write_failure(error) or path_failure(error)
            if line is None:
                raise
            click.echo(line, err=True)
            ctx.exit(2)


#: the exit status when the reader of standard output goes away: 128 + SIGPIPE, as the shell reports it
BROKEN_PIPE_STATUS = 141


def path_failure(error: OSError) -> str | None:
    """The one line for a file name the system cannot take (longer than it allows), met wherever a
    path is first looked at, or None for any other OSError."""
    if error.errno != errno.ENAMETOOLONG:
        return None
    name = error.filename if error.filename is not None else "a file name"
    return (f"Error: {name}: the file name is longer than this system allows (255 bytes a name on most "
            "file systems); rename it or give a shorter path")


def output_write_failure(error: OSError) -> str | None:
    """The one line for an OSError met writing standard output (a full disk, > /dev/full, a broken
    device), or None for any other. The files capgeo writes turn these into one line themselves
    (capgeo._atomic): what reaches here is standard output."""
    if error.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG):
        return None
    return f"Error: cannot write the output: {error.strerror}"


def _replace_what_the_terminal_cannot_encode() -> None:
    """Captions are any language: on a stream whose encoding is not UTF-8 (PYTHONIOENCODING=ascii, an old
    console) a character it cannot encode is written as "?" instead of ending the command mid-table."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "utf-8").lower().replace("-", "").replace("_", "")
        if encoding != "utf8" and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="replace")
            except (ValueError, OSError):  # a detached or closed stream: nothing will be written to it
                pass


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="capgeo")
def main():
    """Profile the geometry of an image-caption dataset's captions before fine-tuning
    a CLIP-style model on it: near-duplicates, hardest companions, in-batch hardness,
    and a starting gamma for HN-CLIP."""
