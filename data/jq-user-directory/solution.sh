#!/bin/bash
# Reference solution: four jq programs.
set -euo pipefail
cd /app
jq -r '.users[] | select(.active) | .email | ascii_downcase' users.json | LC_ALL=C sort > active_emails.txt
jq '[.users[] | select(.active and .team != null)]
    | group_by(.team.name)
    | map({key: .[0].team.name, value: (map(.username) | sort)})
    | from_entries' users.json > teams.json
jq '[.users[] | select(.roles | index("admin")) | {id, username}] | sort_by(.id)' users.json > admins.json
jq -r '.users[] | select(.last_login == null) | .username' users.json | LC_ALL=C sort > never_logged_in.txt
