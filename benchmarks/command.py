"""The command the benchmark supervises: it stamps the moments that matter.

``python -S command.py MODE FIFO TOKEN`` where MODE is

* ``exit``: on SIGTERM, write ``term TOKEN PID STAMP`` and exit at once;
* ``ignore``: on SIGTERM, write the same line and carry on (only SIGKILL stops it);
* ``start``: announce itself and exit 0 straight away;
* ``eof WATCHED``: no signal handling; block reading descriptor WATCHED and,
  at its end of file, write ``term TOKEN PID STAMP`` and exit. This is the
  floor for measure 1: how soon *any* process can learn that a pipe's writer
  died, with nothing else to do.

Every mode first writes ``ready TOKEN PID PPID START`` to FIFO, where START is
``time.monotonic()`` read as the very first thing the program does and PPID
is whoever supervises it (the benchmark learns the supervisor's pid this way,
even for a detached one). CLOCK_MONOTONIC is system-wide, so the benchmark can
subtract its own readings from these stamps.

It is run with ``python -S`` and imports nothing but built-in modules, so its
own start costs as little as an interpreter allows and is the same under every
supervisor; one line is shorter than ``PIPE_BUF``, so lines from many commands
on one FIFO never interleave.
"""

import time

START = time.monotonic()

import os  # noqa: E402 - the start stamp comes first, on purpose
import signal  # noqa: E402
import sys  # noqa: E402


def main() -> int:
    mode, fifo, token = sys.argv[1], sys.argv[2], sys.argv[3]
    out = os.open(fifo, os.O_WRONLY)
    pid = os.getpid()

    def on_term(_number: int, _frame: object) -> None:
        stamp = time.monotonic()
        os.write(out, f"term {token} {pid} {stamp:.9f}\n".encode())
        if mode == "exit":
            os._exit(143)

    if mode in ("exit", "ignore"):
        signal.signal(signal.SIGTERM, on_term)
    os.write(out, f"ready {token} {pid} {os.getppid()} {START:.9f}\n".encode())
    if mode == "start":
        return 0
    if mode == "eof":
        while os.read(int(sys.argv[4]), 64):
            pass
        os.write(out, f"term {token} {pid} {time.monotonic():.9f}\n".encode())
        return 0
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
