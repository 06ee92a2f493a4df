"""A program's exit does not search what it leaves for reference cycles (cli.freeze_at_exit:
0.2 s of every fresh process), and the handlers registered before it still run."""

import subprocess
import sys

# Registered before the program runs, so it runs after the program's own exit handler.
PROBE = """
import atexit, gc
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0, flush=True))
from jaxtrans.programs.cli import run
"""


def exit_line(program: str) -> str:
    code = PROBE + program
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return result.stdout.strip().splitlines()[-1] + f" (status {result.returncode})"


def test_a_program_freezes_what_it_leaves_at_exit_and_keeps_its_status():
    assert exit_line("run(lambda: None)") == "frozen at exit: True (status 0)"
    failed = "from jaxtrans.errors import UserError\ndef main(): raise UserError('bad')\nrun(main)"
    assert exit_line(failed) == "frozen at exit: True (status 2)"


def test_a_process_that_runs_no_program_is_not_frozen():
    # The probe tells the two apart: without run(), nothing freezes.
    assert exit_line("pass") == "frozen at exit: False (status 0)"
