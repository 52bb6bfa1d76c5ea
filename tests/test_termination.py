"""SIGTERM (kill, timeout, a scheduler) ends a command as Ctrl-C does: one line, no traceback,
no partial file, its own exit status. It used to kill the process outright, leaving temporary
files beside the outputs and in the cache and the terminal's cursor hidden."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time

import pytest

from capgeo._atomic import atomic_open
from capgeo.termination import Terminated


def test_sigterm_during_a_command_is_one_line_and_exit_status_143(tmp_path):
    # (SIGINT is not tried: a job started in the background, as CI runs this, inherits it ignored)
    fifo = tmp_path / "captions.jsonl"
    os.mkfifo(fifo)  # reading it blocks until a writer comes: the command is surely running by then
    process = subprocess.Popen([sys.executable, "-m", "capgeo", "info", str(fifo)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                               env={**os.environ, "CAPGEO_CACHE": str(tmp_path / "cache")})
    try:
        time.sleep(4)  # past start-up (imports), into the blocked read
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 143, stderr
    assert stderr.strip().splitlines()[-1] == "Terminated." and "Traceback" not in stderr


def test_termination_removes_the_partial_file_and_keeps_the_old_output(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("the earlier result")
    with pytest.raises(Terminated):
        with atomic_open(target) as handle:
            handle.write("half of a new result")
            raise Terminated()
    assert target.read_text() == "the earlier result"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out.json"]


def test_ctrl_c_while_the_command_line_is_still_importing_ends_like_ctrl_c_anywhere(tmp_path):
    """A Ctrl-C in the first half second landed inside `import click` and printed a traceback."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "class Interrupting:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'capgeo.cli':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupting())\n"
        "from capgeo.__main__ import run\n"
        "run()\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 130
    assert result.stderr == "Interrupted.\n"


def _info_with_summary_replaced(tmp_path, monkeypatch, summary):
    """`capgeo info` in this process with its summary step replaced by ``summary``; the SIGTERM handler
    and the termination flag are restored afterwards."""
    import capgeo.captions
    from click.testing import CliRunner

    from capgeo import termination
    from capgeo.cli import main

    monkeypatch.setattr(capgeo.captions, "summarize_captions", summary)
    (tmp_path / "d.txt").write_text("a caption\nanother caption\n")
    previous = signal.getsignal(signal.SIGTERM)
    try:
        return CliRunner().invoke(main, ["info", str(tmp_path / "d.txt")])
    finally:
        signal.signal(signal.SIGTERM, previous)
        termination.received.clear()


def test_sigterm_re_raised_as_a_plain_interrupt_still_ends_as_a_termination(tmp_path, monkeypatch):
    """Ray's signal check, while the driver waits on its tasks, catches the raised Terminated and
    raises a plain KeyboardInterrupt: `--ray` runs said 'Interrupted.' and exited 130 on SIGTERM."""
    from capgeo import termination

    def waiting_in_a_library(*args, **kwargs):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        except KeyboardInterrupt:
            raise KeyboardInterrupt from None  # what Ray does with any KeyboardInterrupt subclass

    result = _info_with_summary_replaced(tmp_path, monkeypatch, waiting_in_a_library)
    assert result.exit_code == 143 and result.output.strip().endswith("Terminated.")
    assert not termination.was_terminated(KeyboardInterrupt())  # Ctrl-C stays Ctrl-C


def test_a_ctrl_c_after_an_earlier_termination_in_the_same_process_is_a_ctrl_c(tmp_path, monkeypatch):
    from capgeo import termination

    termination.received.set()  # an earlier command in this process was terminated

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    result = _info_with_summary_replaced(tmp_path, monkeypatch, interrupted)
    assert result.exit_code == 130 and result.output.strip().endswith("Interrupted.")


@pytest.mark.parametrize("status", [130, 143])
def test_a_second_signal_after_the_one_line_is_ignored_while_the_process_ends(monkeypatch, status):
    """A second Ctrl-C during the interpreter's clean-up (seconds, for large arrays and torch's exit
    handlers) printed a traceback after "Interrupted."."""
    import signal

    import capgeo.__main__ as entry
    import capgeo.cli

    def interrupted():
        raise SystemExit(status)

    monkeypatch.setattr(capgeo.cli, "main", interrupted)
    saved = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    # run() sets the command line's collection thresholds: here, the test process's own
    monkeypatch.setattr(entry, "COLLECTION_THRESHOLDS", gc.get_threshold())
    try:
        with pytest.raises(SystemExit) as ended:
            entry.run()
        assert ended.value.code == status
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)
    monkeypatch.setattr(capgeo.cli, "main", lambda: None)  # a command that ends well changes nothing
    entry.run()
    assert signal.getsignal(signal.SIGINT) is saved[signal.SIGINT]
