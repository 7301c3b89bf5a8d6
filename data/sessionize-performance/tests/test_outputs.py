"""Verifier for sessionize-performance: exact output on several inputs, two of them under a time limit."""
import importlib.util
import os
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("gen_events", os.path.join(HERE, "gen_events.py"))
gen_events = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_events)

TIME_LIMIT_S = 12.0  # a dict-based solution needs well under 1 s here; the original needs minutes
HEADER = "user_id,events,sessions,longest_session_s"


def reference(rows):
    times = {}
    for user, ts, action in rows:
        if action != "heartbeat":
            times.setdefault(user, []).append(int(ts))
    lines = [HEADER]
    for user in sorted(times):
        ts = sorted(times[user])
        sessions, longest, start = 1, 0, ts[0]
        for prev, cur in zip(ts, ts[1:]):
            if cur - prev > 1800:
                longest, sessions, start = max(longest, prev - start), sessions + 1, cur
        lines.append(f"{user},{len(ts)},{sessions},{max(longest, ts[-1] - start)}")
    return "\n".join(lines) + "\n"


def run_script(tmp_path, rows, limit):
    src, dst = tmp_path / "events.csv", tmp_path / "out.csv"
    with open(src, "w") as f:
        f.write("user_id,ts,action\n")
        f.writelines(f"{u},{t},{a}\n" for u, t, a in rows)
    start = time.monotonic()
    result = subprocess.run(["python3", "/app/sessionize.py", str(src), str(dst)],
                            capture_output=True, text=True, timeout=limit)
    elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stderr
    return dst.read_text(), elapsed


def test_sessions_csv_for_shipped_events():
    with open("/app/sessions.csv") as f:
        assert f.read() == reference(gen_events.rows())


def test_edge_cases_small_input(tmp_path):
    rows = [
        ("u9", 1000, "view"), ("u9", 2800, "click"),        # gap of exactly 1800: same session
        ("u10", 1000, "view"), ("u10", 2801, "view"),       # gap of 1801: new session
        ("u2", 500, "view"), ("u2", 500, "buy"),            # duplicate timestamps
        ("u3", 100, "heartbeat"), ("u3", 200, "heartbeat"),  # heartbeat-only user: no row
        ("u4", 0, "view"), ("u4", 1500, "heartbeat"),       # the heartbeat must not bridge the gap
        ("u4", 3000, "view"), ("u4", 3600, "view"), ("u4", 9000, "buy"),
        ("u1", 7, "view"),
    ]
    out, _ = run_script(tmp_path, list(reversed(rows)), limit=60)
    assert out == reference(rows)


def test_large_input_is_fast_and_correct(tmp_path):
    rows = gen_events.rows(seed=77, n_users=10000)
    try:
        out, elapsed = run_script(tmp_path, rows, limit=TIME_LIMIT_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"took longer than {TIME_LIMIT_S} s")
    assert out == reference(rows)


def test_many_users_input_is_fast_and_correct(tmp_path):
    rows = gen_events.rows(seed=78, n_users=14000)
    try:
        out, elapsed = run_script(tmp_path, rows, limit=TIME_LIMIT_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"took longer than {TIME_LIMIT_S} s")
    assert out == reference(rows)
