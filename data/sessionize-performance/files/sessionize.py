#!/usr/bin/env python3
"""Summarise user sessions from a click-stream export.

Usage: python3 sessionize.py EVENTS_CSV OUTPUT_CSV

EVENTS_CSV has the header user_id,ts,action (ts is an integer Unix time in seconds; the rows
are in no particular order). Rows whose action is "heartbeat" are ignored completely.
A user's remaining events, taken in time order, form sessions: an event that comes more than
1800 seconds after the user's previous event starts a new session.

OUTPUT_CSV gets the header user_id,events,sessions,longest_session_s and one row per user
that has at least one non-heartbeat event, sorted by user_id as plain strings, where
events is the user's number of events, sessions the number of sessions and
longest_session_s the largest (last ts - first ts) over the user's sessions.
"""
import csv
import sys


def main(src, dst):
    rows = []
    with open(src, newline="") as f:
        for row in csv.DictReader(f):
            rows.append(row)

    users = []
    for row in rows:
        if row["action"] != "heartbeat" and row["user_id"] not in users:
            users.append(row["user_id"])
    users.sort()

    summary = []
    for user in users:
        times = []
        for row in rows:
            if row["user_id"] == user and row["action"] != "heartbeat":
                times.append(int(row["ts"]))
        times.sort()
        sessions, longest, start = 1, 0, times[0]
        for prev, cur in zip(times, times[1:]):
            if cur - prev > 1800:
                longest = max(longest, prev - start)
                sessions += 1
                start = cur
        longest = max(longest, times[-1] - start)
        summary.append((user, len(times), sessions, longest))

    with open(dst, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["user_id", "events", "sessions", "longest_session_s"])
        writer.writerows(summary)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
