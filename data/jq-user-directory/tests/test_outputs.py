"""Verifier for jq-user-directory: each output is recomputed from a pristine copy of users.json."""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
USERS = json.load(open(os.path.join(HERE, "users.json")))["users"]


def lines(path):
    with open(path) as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def test_active_emails_lowercase_sorted():
    want = sorted(u["email"].lower() for u in USERS if u["active"])
    assert lines("/app/active_emails.txt") == want


def test_teams_of_active_users():
    want = {}
    for u in USERS:
        if u["active"] and u["team"] is not None:
            want.setdefault(u["team"]["name"], []).append(u["username"])
    want = {team: sorted(names) for team, names in want.items()}
    with open("/app/teams.json") as f:
        assert json.load(f) == want


def test_admins_sorted_by_id_with_two_keys():
    want = [{"id": u["id"], "username": u["username"]} for u in sorted(USERS, key=lambda u: u["id"]) if "admin" in u["roles"]]
    with open("/app/admins.json") as f:
        got = json.load(f)
    assert got == want
    assert all(list(obj) in (["id", "username"], ["username", "id"]) for obj in got)


def test_never_logged_in_usernames():
    want = sorted(u["username"] for u in USERS if u["last_login"] is None)
    assert lines("/app/never_logged_in.txt") == want
