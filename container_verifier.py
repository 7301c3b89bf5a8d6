"""The test verifier: runs inside the episode's container as root, started by reward.py.

reward.py passes this source as `python3 -I -S -B -c SOURCE probe` (in a fresh container: print the runner's
fingerprint) or `INTERPRETER -I -S -B -c SOURCE run CONFIG` (score the episode); nothing is copied in, so the agent
cannot edit it, and -I -S -B ignore PYTHON* variables, site .pth/sitecustomize files and the user site.

probe: runs a small pytest session and records what it loaded: every file the interpreter then has open (the
binary, its shared libraries, each stdlib and site-packages module and its .pyc), /etc/ld.so.preload, pyvenv.cfg and
the path's zip files (all expected absent), the listing of each package directory (a new submodule shadows) and
where each top-level module resolves (a planted pytest.py shadows); it prints that config with a digest of it.
run: with CONFIG (a Python literal written by reward.py: the probe's config plus the staged tests, their hashes,
the timeout and pytest's arguments) it checks the digest before importing anything that lives in a file, swaps the
staged tests in for whatever /tests holds, runs pytest in this process (or the task's run-tests.sh), and then checks
by stat (ctime cannot be set back) that nothing the digest covers changed during the run. A failed check exits
with TAMPERED_EXIT (installing another pytest over the recorded one counts as tampering); SIGALRM ends the whole
run at the test timeout.
"""
import os
import sys
try:
    from _blake2 import blake2b          # built into the interpreter: no file on disk to tamper with
except ImportError:
    from hashlib import blake2b
from _frozen_importlib_external import PathFinder

TAMPERED_EXIT = 86                       # reward.py reads this value from here
TEST_CONFIG_SUFFIXES = (".py", ".ini", ".cfg", ".toml", ".pth")   # files in /tests that could change the run


def file_hash(path):
    try:
        with open(path, "rb") as f:
            return blake2b(f.read()).hexdigest()
    except OSError:
        return "absent"


def file_stat(path):
    try:
        s = os.stat(path)
    except OSError:
        return None
    return s.st_ino, s.st_dev, s.st_size, s.st_mtime_ns, s.st_ctime_ns, s.st_mode


def listing(directory):
    try:
        return "/".join(sorted(os.listdir(directory)))
    except OSError:
        return "absent"


def origin(cfg, name):
    spec = PathFinder.find_spec(name, cfg["path"])
    return str(spec and spec.origin)


def digest(cfg):
    """Contents: compared with the digest taken from the image."""
    h = blake2b()
    for path in cfg["files"]:
        h.update(("%s=%s\n" % (path, file_hash(path))).encode())
    for directory in cfg["dirs"]:
        h.update(("%s:%s\n" % (directory, listing(directory))).encode())
    for name in cfg["top"]:
        h.update(("%s@%s\n" % (name, origin(cfg, name))).encode())
    return h.hexdigest()


def snapshot(cfg):
    """Cheap re-check after the run: a write, rename or chmod changes ctime."""
    return ([file_stat(p) for p in cfg["files"]], [listing(d) for d in cfg["dirs"]],
            [origin(cfg, n) for n in cfg["top"]])


def tests_intact(cfg):
    """/tests holds exactly the staged files (and no extra file that could configure pytest)."""
    if any(file_hash("/tests/" + rel) != want for rel, want in cfg["tests"].items()):
        return False
    for root, dirs, names in os.walk("/tests"):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), "/tests")
            if rel not in cfg["tests"] and name.endswith(TEST_CONFIG_SUFFIXES):
                return False
    return True


def probe():
    """In a fresh container: what does a pytest run load? Prints the config (a Python literal)."""
    import site
    sitedirs = [d for d in site.getsitepackages() if os.path.isdir(d)]
    home = [d for d in sitedirs if PathFinder.find_spec("pytest", [d])][:1]   # pytest's own site dir goes first
    path = sys.path + home + [d for d in sitedirs if d not in home]
    sys.path[:] = path
    work = "/tmp/.verifier-probe-%d" % os.getpid()
    os.makedirs(work)
    with open(work + "/test_probe.py", "w") as f:
        f.write("import pytest\n@pytest.mark.parametrize('x', [1, 2])\ndef test_pass(x): assert x\n"
                "def test_fail(): assert [1, 2] == [1, 3]\n@pytest.mark.skip\ndef test_skip(): pass\n")
    saved = os.dup(1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)     # pytest's report is not our answer
    import pytest
    pytest.main([work + "/test_probe.py", "-rA", "-p", "no:cacheprovider", "--rootdir", work, "-c", "/dev/null",
                 "--junitxml", work + "/report.xml"])
    os.dup2(saved, 1)
    import shutil
    shutil.rmtree(work)
    modules = [m for m in list(sys.modules.values()) if isinstance(getattr(m, "__file__", None), str)
               and not m.__file__.startswith(work)]
    exe = os.path.realpath(sys.executable)
    files = {exe, os.path.dirname(exe) + "/pyvenv.cfg", os.path.dirname(os.path.dirname(exe)) + "/pyvenv.cfg",
             "/etc/ld.so.preload"} | {p for p in path if not os.path.isdir(p)}
    files |= {m.__file__ for m in modules}
    files |= {m.__cached__ for m in modules if getattr(m, "__cached__", None) and os.path.exists(m.__cached__)}
    with open("/proc/self/maps") as maps:
        files |= {p for p in (line.split(None, 5)[-1].strip() for line in maps)
                  if p.startswith("/") and not p.endswith("(deleted)")}
    cfg = {"exe": exe, "path": path, "files": sorted(files),
           "dirs": sorted({os.path.dirname(m.__file__) for m in modules if hasattr(m, "__path__")}),
           "top": sorted({m.__name__.split(".")[0] for m in modules})}
    cfg["digest"] = digest(cfg)
    print(repr(cfg))


def run(cfg):
    """Check, swap the staged tests in, run them, check again; returns the exit code."""
    import _signal
    _signal.alarm(cfg["timeout"])        # SIGALRM ends the whole run at the test timeout
    before = snapshot(cfg)
    if digest(cfg) != cfg["digest"]:
        return TAMPERED_EXIT
    if os.path.lexists("/tests"):        # whatever the agent left there
        os.rename("/tests", cfg["staged"] + "/replaced")
    os.rename(cfg["staged"] + "/tests", "/tests")
    if not tests_intact(cfg):
        return TAMPERED_EXIT
    if cfg["script"]:                    # the task's run-tests.sh: trusts bash and the script's python
        pid = os.fork()
        if pid == 0:
            os.chdir("/app" if os.path.isdir("/app") else "/")
            os.execve("/bin/bash", ["bash", "/tests/run-tests.sh"], dict(os.environ, TEST_DIR="/tests",
                      PYTEST_ADDOPTS="--junitxml=%s -p no:cacheprovider" % cfg["xml"]))
        status = os.waitpid(pid, 0)[1]
        code = 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    else:
        sys.path[:] = cfg["path"]
        os.chdir("/tests")
        import pytest
        code = int(pytest.main(cfg["args"]))
    return TAMPERED_EXIT if snapshot(cfg) != before or not tests_intact(cfg) else code


if __name__ == "__main__":
    if sys.argv[1] == "probe":
        probe()
    else:                                # no json or ast: they are files that the digest has not checked yet
        sys.exit(run(eval(sys.argv[2], {"__builtins__": {}})))
