#!/bin/bash
# Reference solution: group timestamps per user in one dict pass (O(n log n) overall instead of O(n * users)).
set -euo pipefail
cat > /app/sessionize.py <<'PY'
#!/usr/bin/env python3
"""Summarise user sessions from a click-stream export (fast version; same semantics as before).

Usage: python3 sessionize.py EVENTS_CSV OUTPUT_CSV
Heartbeat rows are ignored; a gap of more than 1800 s starts a new session; one output row per
user (sorted by user_id as strings) with events, sessions and longest_session_s.
"""
import csv
import sys
from collections import defaultdict


def main(src, dst):
    times_by_user = defaultdict(list)
    with open(src, newline="") as f:
        for row in csv.DictReader(f):
            if row["action"] != "heartbeat":
                times_by_user[row["user_id"]].append(int(row["ts"]))

    with open(dst, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["user_id", "events", "sessions", "longest_session_s"])
        for user in sorted(times_by_user):
            times = sorted(times_by_user[user])
            sessions, longest, start = 1, 0, times[0]
            for prev, cur in zip(times, times[1:]):
                if cur - prev > 1800:
                    longest = max(longest, prev - start)
                    sessions += 1
                    start = cur
            longest = max(longest, times[-1] - start)
            writer.writerow([user, len(times), sessions, longest])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
PY
python3 /app/sessionize.py /app/events.csv /app/sessions.csv
