"""The exec supervisor: runs inside the sandbox container, one process per `Sandbox.exec` call.

sandbox.py passes this source as `python3 -I -S -c SOURCE COMMAND TIMEOUT KEEP CWD` (nothing is copied into the
container, so the agent cannot edit it). It runs `bash -c COMMAND` in CWD in its own session and process group,
SIGKILLs that whole group at TIMEOUT, and prints the header "exit_code timed_out head_length dropped_bytes"
followed by the first and the last KEEP bytes of the combined stdout+stderr: the cap applies in the container,
so `yes` cannot flood the host. When the command ends by itself, jobs it left get SIGHUP as when a terminal
closes: `cmd &` (and fork bombs) end, `nohup cmd &` and `setsid cmd &` keep running.
Only built-in modules are imported, to keep the start-up of every command short; no annotations, so that any
python3 an image has can run it.
"""
import os
import select
import sys
import time
from _signal import SIGHUP, SIGKILL     # not `signal`: importing it (enum) would double the start-up time


def start(command, cwd):
    """Fork `bash -c command` as the leader of a new session; returns (pid, read end of its output pipe)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()                  # own session and process group: the whole tree can be signalled
            os.dup2(w, 1)
            os.dup2(w, 2)
            os.dup2(os.open("/dev/null", os.O_RDONLY), 0)
            os.closerange(3, 4096)
            try:
                os.chdir(cwd)
            except OSError:
                os.chdir("/")
            os.execvp("bash", ["bash", "-c", command])
        finally:
            os._exit(127)
    os.close(w)
    return pid, r


class CappedOutput:
    """Keeps the first `keep` bytes and (at least) the last `keep` bytes of a pipe, and counts the rest."""

    def __init__(self, fd, keep):
        self.fd, self.keep = fd, keep
        self.head, self.tail, self.total = bytearray(), bytearray(), 0

    def pump(self, wait):
        """True: read some output, False: end of output, None: nothing within `wait` seconds."""
        if not select.select([self.fd], [], [], wait)[0]:
            return None
        data = os.read(self.fd, 65536)
        if not data:
            return False
        self.total += len(data)
        room = max(0, self.keep - len(self.head))
        self.head.extend(data[:room])
        self.tail.extend(data[room:])
        if len(self.tail) > 2 * self.keep:
            del self.tail[:-self.keep]
        return True


def main():
    command, limit, keep, cwd = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    pid, r = start(command, cwd)
    out = CappedOutput(r, keep)

    def signal_group(sig):               # False once the group is gone
        try:
            os.killpg(pid, sig)
            return True
        except OSError:
            return False

    deadline, status, timed_out, is_open = time.monotonic() + limit, None, False, True
    while status is None:
        if is_open:
            is_open = out.pump(0.05) is not False
        else:
            time.sleep(0.001)            # output closed, command still running: poll for its exit
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
        elif time.monotonic() > deadline:
            timed_out = True
            signal_group(SIGKILL)
            status = os.waitpid(pid, 0)[1]
    if timed_out:                        # SIGKILL until the group is gone (a fork bomb refills it)
        while signal_group(SIGKILL) and time.monotonic() < deadline + 3:
            time.sleep(0.01)
    elif signal_group(0):                # jobs left: let `nohup`/`setsid` detach, then hang up like a closed terminal
        time.sleep(0.25)
        signal_group(SIGHUP)
    while is_open:                       # collect the last output; a daemon may keep the pipe open for ever
        got = out.pump(0.1)
        if got is None:
            break
        is_open = got
    try:
        drain = is_open and os.fork() == 0
    except OSError:
        drain = False
    if drain:                            # keep reading for that daemon so it never blocks or gets SIGPIPE
        os.setsid()
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        while os.read(r, 65536):
            pass
        os._exit(0)
    code = 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    head = bytes(out.head)
    tail = bytes(out.tail[-keep:]) if keep else b""
    dropped = out.total - len(head) - len(tail)
    sys.stdout.buffer.write(b"%d %d %d %d\n" % (code, timed_out, len(head), dropped) + head + tail)


if __name__ == "__main__":
    main()
