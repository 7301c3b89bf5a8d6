#!/bin/bash
# Reference solution: restore the file from the parent of the deleting commit, then revert.
set -euo pipefail
cd /app/repo
git checkout -q main
removed=$(git log --format=%H --grep='^Remove unused settings$' main)
git checkout "$removed^" -- config/settings.ini
git commit -q -m "Restore config/settings.ini"
debug=$(git log --format=%H --grep='^Enable debug mode$' main)
git revert --no-edit "$debug"
