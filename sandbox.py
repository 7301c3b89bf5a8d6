"""Docker sandboxes for terminal-agent episodes: task loading, task images, one container per episode.

- Tasks are terminal-bench v0.1.x directories (task.yaml, Dockerfile, tests/test_outputs.py, optional
  run-tests.sh and solution.sh). `load_task` validates one; every error names the task, the file and the problem.
- Task images are built from each task's Dockerfile with a build context that leaves out tests/, run-tests.sh
  and the solution (so the agent can never find them in the image). The tag carries a hash of that context
  and of the base image id, so an image is rebuilt only when one of them changes.
- `Sandbox` is one container per episode: docker-init as PID 1, working directory /app, no network unless the
  task sets `allow_network: true`, memory/CPU/process limits, not privileged, nothing mounted from the host.
  Containers are labelled with the owning process, so a later run removes the leftovers of a crashed one.
- `exec` runs `bash -c COMMAND` under a small Python supervisor inside the container (`_SUPERVISOR`). The
  command gets its own process group. At the timeout the whole group is killed. When the command ends by itself
  the group gets SIGHUP, as when a terminal closes: stray background jobs (and fork bombs) end, while
  `nohup`-ed or `setsid`-ed daemons keep running. Output is capped inside the container (head + tail), so
  `yes` cannot flood the host.
- Background sessions: a `setsid` process whose stdin is a FIFO and whose output goes to a log file;
  the byte offset already shown is kept here, under a lock.

Deliberate simplifications: each command starts afresh in /app (`cd` and variables do not carry over; use
a session for that); session programs see a pipe, not a terminal (`python3 -i` for a REPL); the image must
have bash and python3 (the supervisor and the verifier need them); disk use is not limited (no quota on
overlay2 over ext4); a SIGKILL of the training process leaves containers that the next run removes.
"""
import atexit
import hashlib
import io
import logging
import os
import posixpath
import re
import secrets
import socket
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import docker
import yaml

BASE_IMAGE = os.environ.get("BASE_IMAGE", "terminal-grpo-base:bookworm")
CONTAINER_LABEL = "terminal-grpo"                  # "terminal-grpo"="1" on every container we start
OWNER_LABEL = "terminal-grpo.owner"                # "host:pid:process-start-time" of the process that started it
HIDDEN_FROM_IMAGE = {"tests", "run-tests.sh", "solution.sh", "solution.yaml"}   # never in the build context
SESSION_ROOT = "/tmp/.sessions"
log = logging.getLogger("terminal_grpo.sandbox")


class TaskError(ValueError):
    """A task directory that cannot be used; the message names the task, the file and the problem."""


@dataclass
class Task:
    task_id: str                            # directory name
    path: Path                              # task directory (build context)
    instruction: str
    difficulty: str = "medium"
    max_agent_timeout_sec: float = 360.0
    max_test_timeout_sec: float = 60.0
    tags: list[str] = field(default_factory=list)
    parser_name: str = "pytest"
    run_tests_in_same_shell: bool = False
    allow_network: bool = False             # our own optional task.yaml key

    @property
    def solution(self) -> Path | None:
        path = self.path / "solution.sh"
        return path if path.is_file() else None


_OPTIONAL_KEYS = {"difficulty": str, "max_agent_timeout_sec": float, "max_test_timeout_sec": float,
                  "tags": list, "parser_name": str, "run_tests_in_same_shell": bool, "allow_network": bool}


def load_task(path) -> Task:
    """Validate one terminal-bench task directory; unknown task.yaml keys (author_name, ...) are allowed."""
    path = Path(path).resolve()
    task_id = path.name

    def error(file, problem):
        return TaskError(f"task '{task_id}': {file}: {problem}")

    if not path.is_dir():
        raise error(str(path), "not a directory")
    for required in ("task.yaml", "Dockerfile", "tests/test_outputs.py"):
        if not (path / required).is_file():
            raise error(required, "missing")
    try:
        spec = yaml.safe_load((path / "task.yaml").read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise error("task.yaml", f"invalid YAML: {e}") from None
    if not isinstance(spec, dict):
        raise error("task.yaml", "expected a mapping of keys to values")
    instruction = spec.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise error("task.yaml", "missing required key 'instruction' (a non-empty string)")
    values = {}
    for key, kind in _OPTIONAL_KEYS.items():
        value = spec.get(key)
        if value is None:
            continue
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if (kind is float and not (is_number and value > 0)) or (kind is not float and not isinstance(value, kind)):
            raise error("task.yaml", f"'{key}' must be {'a positive number' if kind is float else kind.__name__}, "
                                     f"got {value!r}")
        values[key] = float(value) if kind is float else value
    if not all(isinstance(tag, str) for tag in values.get("tags", [])):
        raise error("task.yaml", "'tags' must be a list of strings")
    if values.get("parser_name", "pytest") != "pytest":
        raise error("task.yaml", f"parser_name {values['parser_name']!r} is not supported (only 'pytest')")
    return Task(task_id=task_id, path=path, instruction=instruction, **values)


def load_tasks(root_or_paths) -> list[Task]:
    """Load a directory of task directories (or one task directory, or a list of them); report every broken task."""
    if isinstance(root_or_paths, (str, Path)):
        root = Path(root_or_paths)
        if (root / "task.yaml").exists():
            paths = [root]
        elif root.is_dir():
            paths = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
        else:
            raise TaskError(f"{root}: neither a task directory nor a directory of tasks")
        if not paths:
            raise TaskError(f"{root}: no task directories found")
    else:
        paths = [Path(p) for p in root_or_paths]
    tasks, errors = [], []
    for path in paths:
        try:
            tasks.append(load_task(path))
        except TaskError as e:
            errors.append(str(e))
    seen = set()
    for task in tasks:
        if task.task_id in seen:
            errors.append(f"task '{task.task_id}': task.yaml: two task directories share this name")
        seen.add(task.task_id)
    if errors:
        raise TaskError("\n".join(errors))
    return tasks


# ----------------------------------------------------------------------------------------------- task images

_client_lock = threading.Lock()
_shared_client = None
_build_locks: dict[str, threading.Lock] = {}


def _client() -> docker.DockerClient:
    """One client per process; its connection pool is sized for many sandboxes working at once."""
    global _shared_client
    with _client_lock:
        if _shared_client is None:
            _shared_client = docker.from_env(timeout=600, max_pool_size=256)
        return _shared_client


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "task"


def _context_files(task_dir: Path) -> list[tuple[str, Path]]:
    """Build-context entries (relative path, path), sorted; tests and solutions are left out."""
    entries = []
    for path in sorted(task_dir.rglob("*")):
        parts = path.relative_to(task_dir).parts
        if parts[0] not in HIDDEN_FROM_IMAGE and "__pycache__" not in parts:
            entries.append(("/".join(parts), path))
    return entries


def _base_image_ids(dockerfile: str, client) -> list[str]:
    """Image ids of the Dockerfile's FROM images (names when not present locally), so a rebuilt base counts."""
    ids, stages = [], set()
    for line in dockerfile.splitlines():
        words = [w for w in line.split() if not w.startswith("--")]
        if len(words) < 2 or words[0].upper() != "FROM":
            continue
        if words[1].lower() not in stages:
            try:
                ids.append(client.images.get(words[1]).id)
            except docker.errors.ImageNotFound:
                ids.append(words[1])
        if len(words) >= 4 and words[2].upper() == "AS":
            stages.add(words[3].lower())
    return ids


def build_task_image(task: Task, client=None) -> str:
    """Build (or reuse) the task's image; the tag `terminal-grpo-task/<id>:<hash16>` changes with its inputs."""
    client = client or _client()
    files = _context_files(task.path)
    digest = hashlib.sha256()
    for base in _base_image_ids((task.path / "Dockerfile").read_text(errors="replace"), client):
        digest.update(f"FROM {base}\0".encode())
    for rel, path in files:
        if path.is_symlink():
            digest.update(f"L {rel} {os.readlink(path)}\0".encode())
        elif path.is_file():
            content = hashlib.sha256(path.read_bytes()).hexdigest()
            digest.update(f"F {rel} {os.access(path, os.X_OK)} {content}\0".encode())
        else:
            digest.update(f"D {rel}\0".encode())
    tag = f"terminal-grpo-task/{_slug(task.task_id)}:{digest.hexdigest()[:16]}"
    with _client_lock:
        lock = _build_locks.setdefault(tag, threading.Lock())
    with lock:   # a second thread asking for the same image waits for the first build
        try:
            client.images.get(tag)
            return tag
        except docker.errors.ImageNotFound:
            pass
        context = io.BytesIO()
        with tarfile.open(fileobj=context, mode="w") as tar:
            for rel, path in files:
                tar.add(path, arcname=rel, recursive=False)
        context.seek(0)
        try:
            client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True,
                                labels={"terminal-grpo.task": task.task_id})
        except docker.errors.BuildError as e:
            lines = "".join(str(c.get("stream") or c.get("error") or "") for c in e.build_log if isinstance(c, dict))
            tail = "\n".join(lines.strip().splitlines()[-15:])
            raise TaskError(f"task '{task.task_id}': Dockerfile: build failed: {e.msg}\n{tail}") from None
        except docker.errors.APIError as e:
            raise TaskError(f"task '{task.task_id}': Dockerfile: build failed: {e.explanation or e}") from None
    log.info("built %s", tag)
    return tag


def build_task_images(tasks: list[Task], max_workers: int = 4) -> dict[str, str]:
    """Build all task images in parallel; raises one TaskError listing every task whose build failed."""
    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        futures = {task.task_id: pool.submit(build_task_image, task) for task in tasks}
    images, errors = {}, []
    for task_id, future in futures.items():
        try:
            images[task_id] = future.result()
        except TaskError as e:
            errors.append(str(e))
    if errors:
        raise TaskError("\n".join(errors))
    return images


# ------------------------------------------------------------------------------- ownership and clean-up

def _process_start(pid: int) -> str | None:
    """Start time of a process (clock ticks since boot): with the pid it identifies a process despite pid reuse."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{_process_start(os.getpid())}"


def cleanup_stale_containers(client=None) -> int:
    """Remove our containers whose owning process (on this host) no longer runs; returns how many."""
    client, host, removed = client or _client(), socket.gethostname(), 0
    for container in client.containers.list(all=True, filters={"label": f"{CONTAINER_LABEL}=1"}):
        owner_host, _, rest = container.labels.get(OWNER_LABEL, "").partition(":")
        pid, _, started = rest.partition(":")
        if owner_host != host or not pid.isdigit() or str(_process_start(int(pid))) == started:
            continue
        try:
            container.remove(force=True)
            removed += 1
        except docker.errors.APIError:
            pass   # already gone, or being removed by someone else
    return removed


_live: set["Sandbox"] = set()        # started and not closed: closed at interpreter exit (also after Ctrl-C)
_live_lock = threading.Lock()
_stale_checked = False


@atexit.register
def _close_live_sandboxes():
    for sandbox in list(_live):
        sandbox.close()


# --------------------------------------------------------------------------------------------- the sandbox

@dataclass
class ExecResult:
    exit_code: int | None                   # None when timed out / killed
    output: str                             # combined stdout+stderr, head+tail capped with a marker
    timed_out: bool = False
    seconds: float = 0.0


class SandboxError(RuntimeError):
    """The container died, could not start, or Docker failed."""


def _drop_marker(dropped: int) -> str:
    return f"\n[... {dropped} bytes of output dropped ...]\n"


# Runs inside the container as `python3 -I -S -c _SUPERVISOR COMMAND TIMEOUT KEEP CWD`; prints one header
# line "exit_code timed_out head_length dropped_bytes", then the first and the last KEEP bytes of the output.
_SUPERVISOR = r"""
import os, select, sys, time
from _signal import SIGHUP, SIGKILL     # not `signal`: importing it (enum) would double the start-up time
command, limit, keep, cwd = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        os.setsid()                      # own session and process group: the whole tree can be signalled
        os.dup2(w, 1); os.dup2(w, 2); os.dup2(os.open("/dev/null", os.O_RDONLY), 0); os.closerange(3, 4096)
        try: os.chdir(cwd)
        except OSError: os.chdir("/")
        os.execvp("bash", ["bash", "-c", command])
    finally:
        os._exit(127)
os.close(w)
head, tail, total = bytearray(), bytearray(), 0
def pump(wait):                          # True: read some output, False: end of output, None: nothing yet
    global total
    if not select.select([r], [], [], wait)[0]: return None
    data = os.read(r, 65536)
    if not data: return False
    total += len(data)
    room = max(0, keep - len(head))
    head.extend(data[:room]); tail.extend(data[room:])
    if len(tail) > 2 * keep: del tail[:-keep]
    return True
deadline, status, timed_out, is_open = time.monotonic() + limit, None, False, True
while status is None:
    if is_open: is_open = pump(0.05) is not False
    else: time.sleep(0.001)             # output closed, command still running: poll for its exit
    done, st = os.waitpid(pid, os.WNOHANG)
    if done: status = st
    elif time.monotonic() > deadline:
        timed_out = True
        try: os.killpg(pid, SIGKILL)
        except OSError: pass
        status = os.waitpid(pid, 0)[1]
for _ in range(300 if timed_out else 1):     # SIGHUP like a closed terminal; after a timeout, SIGKILL until gone
    try: os.killpg(pid, SIGKILL if timed_out else SIGHUP)
    except OSError: break
    time.sleep(0.01)
while is_open:                           # collect the last output; a daemon may keep the pipe open for ever
    got = pump(0.1)
    if got is None: break
    is_open = got
try: drain = is_open and os.fork() == 0
except OSError: drain = False
if drain:                                # keep reading for that daemon so it never blocks or gets SIGPIPE
    os.setsid(); null = os.open("/dev/null", os.O_RDWR); [os.dup2(null, fd) for fd in (0, 1, 2)]
    while os.read(r, 65536): pass
    os._exit(0)
code = 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
tail = bytes(tail[-keep:]) if keep else b""
sys.stdout.buffer.write(b"%d %d %d %d\n" % (code, timed_out, len(head), total - len(head) - len(tail)) + head + tail)
"""

# Sessions: $1 is the session directory (ours), $2 the command or the text to send.
_SESSION_START = r"""mkdir -p "$1" && mkfifo "$1/in" && : > "$1/log" || exit 1
cd /app 2>/dev/null || cd /
PYTHONUNBUFFERED=1 setsid bash -c 'bash -c "$2" 0<>"$1/in" >>"$1/log" 2>&1; echo $? > "$1/exit"' _ "$1" "$2" \
  </dev/null >/dev/null 2>&1 &"""
_SESSION_WRITE = r"""[ -e "$1/exit" ] && exit 0
printf '%s\n' "$2" 1<>"$1/in" || exit 1
p=-1; quiet=0
for _ in $(seq 50); do                   # wait until the log stops growing for 0.3 s (5 s at most)
  sleep 0.1; s=$(stat -c %s "$1/log")
  if [ "$s" = "$p" ]; then quiet=$((quiet + 1)); [ $quiet -ge 3 ] && break; else quiet=0; fi; p=$s
done"""


class Sandbox:
    """One container per episode; use as a context manager (the container is removed however the block ends)."""

    def __init__(self, task: Task, image: str | None = None, *, mem_limit="1g", cpus=1.0, pids_limit=256,
                 max_output_chars=10_000, labels: dict[str, str] | None = None):
        self.task, self.image = task, image
        self.mem_limit, self.cpus, self.pids_limit = mem_limit, cpus, pids_limit
        self.max_output_chars = max_output_chars
        self.labels = labels or {}
        self.container = None
        self._sessions: dict[str, list] = {}     # session id -> [directory, bytes of its log already shown]
        self._session_lock = threading.Lock()

    def __enter__(self) -> "Sandbox":
        return self.start()

    def __exit__(self, *exc_info):
        self.close()

    def start(self) -> "Sandbox":
        global _stale_checked
        if self.container is not None:
            return self
        client = _client()
        with _live_lock:
            check_stale, _stale_checked = not _stale_checked, True
        if check_stale:
            removed = cleanup_stale_containers(client)
            if removed:
                log.warning("removed %d containers left by crashed earlier runs", removed)
        image = self.image or build_task_image(self.task, client)
        labels = {CONTAINER_LABEL: "1", OWNER_LABEL: _owner(), "terminal-grpo.task": self.task.task_id, **self.labels}
        try:
            self.container = client.containers.create(
                image, entrypoint=["sleep", "infinity"], init=True, working_dir="/app", labels=labels,
                name=f"tg-{_slug(self.task.task_id)[:40]}-{secrets.token_hex(4)}", detach=True,
                network_mode=None if self.task.allow_network else "none", privileged=False,
                mem_limit=self.mem_limit, memswap_limit=self.mem_limit, nano_cpus=int(self.cpus * 1e9),
                pids_limit=self.pids_limit)
        except docker.errors.DockerException as e:
            raise SandboxError(f"task '{self.task.task_id}': cannot create a container from {image}: {e}") from e
        with _live_lock:
            _live.add(self)
        try:
            self.container.start()
        except docker.errors.DockerException as e:
            self.close()
            raise SandboxError(f"task '{self.task.task_id}': cannot start a container from {image}: {e}") from e
        return self

    def _docker_exec(self, argv, timeout, user=None, environment=None, max_bytes=1 << 20):
        """Run argv in the container (no shell); returns (Docker's exit code or None if not done in time, output).

        The output is read with a deadline from the raw exec stream (docker-py's own readers block without one)."""
        if self.container is None:
            raise SandboxError("the sandbox is not started (or already closed)")
        api = self.container.client.api
        kept, deadline, finished = bytearray(), time.monotonic() + timeout, False
        try:
            exec_id = api.exec_create(self.container.id, argv, user=user or "", environment=environment,
                                      workdir="/")["Id"]
            response = api._post_json(api._url("/exec/{0}/start", exec_id), data={"Tty": False, "Detach": False},
                                      headers={"Connection": "Upgrade", "Upgrade": "tcp"}, stream=True)
            api._raise_for_status(response)
            stream = response.raw._fp.fp      # buffered: it may already hold the first frames
            pending = bytearray()
            try:
                while (left := deadline - time.monotonic()) > 0:
                    stream.raw._sock.settimeout(left)
                    chunk = stream.read1(65536)
                    if not chunk:
                        finished = True
                        break
                    pending += chunk
                    while len(pending) >= 8 and len(pending) >= 8 + int.from_bytes(pending[4:8], "big"):
                        size = int.from_bytes(pending[4:8], "big")    # frame: stream id, 3 pad bytes, size
                        kept += pending[8:8 + size]
                        del pending[:8 + size]
                        if len(kept) > max_bytes:
                            del kept[max_bytes // 2: len(kept) - max_bytes // 2]
            except (socket.timeout, TimeoutError):
                pass
            finally:
                response.close()
            exit_code = api.exec_inspect(exec_id)["ExitCode"] if finished else None
        except (docker.errors.DockerException, OSError) as e:
            if not self.is_alive():
                raise SandboxError(f"task '{self.task.task_id}': the container is gone ({e})") from e
            return None, f"[docker exec failed: {e}]".encode()
        if not finished and not self.is_alive():
            raise SandboxError(f"task '{self.task.task_id}': the container died")
        return exit_code, bytes(kept)

    def exec_argv(self, argv: list[str], timeout: float = 60.0, user: str | None = None,
                  environment: dict[str, str] | None = None) -> ExecResult:
        """Run argv directly (no shell, no supervisor); the exit code is Docker's own (the verifier relies on it)."""
        started = time.monotonic()
        code, output = self._docker_exec(argv, timeout, user, environment, max_bytes=4 * self.max_output_chars)
        return ExecResult(code, output.decode(errors="replace"), code is None, time.monotonic() - started)

    def exec(self, command: str, timeout: float = 20.0, user: str | None = None) -> ExecResult:
        """Run `bash -c command` in /app; kills the command's whole process tree at the timeout."""
        started, keep, timeout = time.monotonic(), self.max_output_chars // 2, max(float(timeout), 0.1)
        argv = ["python3", "-I", "-S", "-c", _SUPERVISOR, str(command).replace("\0", ""), str(timeout), str(keep),
                "/app"]
        # The supervisor enforces the timeout; the longer deadline here only guards against a broken one.
        code, raw = self._docker_exec(argv, timeout + 15, user, max_bytes=4 * keep + 4096)
        header, _, body = raw.partition(b"\n")
        fields = header.split()
        if len(fields) != 4 or not all(f.isdigit() for f in fields):   # the supervisor itself could not run
            return ExecResult(code, raw.decode(errors="replace"), code is None, time.monotonic() - started)
        exit_code, timed_out, head_length, dropped = map(int, fields)
        head, tail = body[:head_length].decode(errors="replace"), body[head_length:].decode(errors="replace")
        output = head + _drop_marker(dropped) + tail if dropped else head + tail
        return ExecResult(None if timed_out else exit_code, output, bool(timed_out), time.monotonic() - started)

    def start_session(self, session_id: str, command: str) -> str:
        """Start `command` in the background as session `session_id`; returns a short status line."""
        with self._session_lock:
            if session_id in self._sessions and not self._session_ended(self._sessions[session_id][0]):
                return f"[session '{session_id}' is already running; view it or write to it]"
            directory = f"{SESSION_ROOT}/{len(self._sessions)}-{secrets.token_hex(3)}"
            result = self.exec_argv(["bash", "-c", _SESSION_START, "_", directory, str(command)], timeout=30)
            if result.exit_code != 0:
                return f"[could not start session '{session_id}': {result.output.strip()}]"
            self._sessions[session_id] = [directory, 0]
        return f"[started session '{session_id}' in the background]"

    def _session_ended(self, directory: str) -> bool:
        return self.exec_argv(["test", "-e", f"{directory}/exit"], timeout=30).exit_code == 0

    def view_session(self, session_id: str) -> str:
        """Output of the session since the last view (capped), or a marker when there is none or it ended."""
        with self._session_lock:
            if session_id not in self._sessions:
                return f"[no session named '{session_id}']"
            directory, offset = self._sessions[session_id]
            result = self.exec(f'e=$(cat {directory}/exit 2>/dev/null); s=$(stat -c %s {directory}/log) || exit 1; '
                               f'echo "$s $e"; tail -c +{offset + 1} {directory}/log | head -c $((s - {offset}))',
                               timeout=30)
            header, _, output = result.output.partition("\n")
            fields = header.split()
            if result.exit_code != 0 or not fields or not fields[0].isdigit():
                return f"[cannot read session '{session_id}': {result.output.strip()[:500]}]"
            self._sessions[session_id][1] = int(fields[0])
        ended = f"[session '{session_id}' ended with exit code {fields[1]}]" if len(fields) > 1 else ""
        if not output:
            return f"[no new output{'; ' + ended[1:-1] if ended else ''}]"
        return output + (("" if output.endswith("\n") else "\n") + ended if ended else "")

    def write_to_session(self, session_id: str, text: str) -> str:
        """Send text + newline to the session's stdin; returns the output that follows (waits until it goes quiet)."""
        with self._session_lock:
            if session_id not in self._sessions:
                return f"[no session named '{session_id}']"
            directory = self._sessions[session_id][0]
        self.exec_argv(["bash", "-c", _SESSION_WRITE, "_", directory, str(text).replace("\0", "")], timeout=30)
        return self.view_session(session_id)

    def _put_tar(self, build) -> None:
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            build(tar)
        try:
            self.container.put_archive("/", archive.getvalue())   # Docker creates missing parent directories
        except docker.errors.APIError as e:
            if not self.is_alive():
                raise SandboxError(f"task '{self.task.task_id}': the container is gone ({e})") from e
            raise ValueError(e.explanation or str(e)) from None

    def write_file(self, path: str, content: str | bytes, mode: int = 0o644) -> None:
        """Write content to path (relative paths are under /app) through the archive API: no shell quoting.

        Raises ValueError for a path that cannot be written (e.g. a parent is a file), SandboxError if the
        container is gone."""
        if self.container is None:
            raise SandboxError("the sandbox is not started (or already closed)")
        target = posixpath.normpath(posixpath.join("/app", str(path)))
        if target == "/" or str(path).endswith("/"):
            raise ValueError(f"not a file path: {path!r}")
        data = content.encode() if isinstance(content, str) else bytes(content)
        info = tarfile.TarInfo(target.lstrip("/"))
        info.size, info.mode, info.mtime = len(data), mode, int(time.time())
        self._put_tar(lambda tar: tar.addfile(info, io.BytesIO(data)))

    def copy_dir(self, host_dir, container_dir: str) -> None:
        """Copy a host directory into the container as container_dir (owned by root; __pycache__ left out)."""
        if self.container is None:
            raise SandboxError("the sandbox is not started (or already closed)")

        def as_root(info):
            if "__pycache__" in info.name.split("/"):
                return None
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            return info
        self._put_tar(lambda tar: tar.add(str(host_dir), arcname=container_dir.strip("/"), filter=as_root))

    def is_alive(self) -> bool:
        try:
            self.container.reload()
            return self.container.status == "running"
        except (AttributeError, docker.errors.DockerException):
            return False

    def close(self) -> None:
        """Remove the container (idempotent, safe from any thread)."""
        container, self.container = self.container, None
        with _live_lock:
            _live.discard(self)
        if container is not None:
            try:
                container.remove(force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as e:
                if "in progress" not in str(e):
                    log.warning("could not remove container %s: %s", container.name, e)
