#!/bin/bash
# Reference solution: create the user, then set modes from the general rule to the exceptions.
set -euo pipefail
id webapp >/dev/null 2>&1 || useradd --system --user-group --no-create-home webapp
find /app/site -type d -exec chmod 755 {} +
find /app/site -type f -exec chmod 644 {} +
chmod 755 /app/site/bin/*
chown webapp:webapp /app/site/config/secret.key
chmod 600 /app/site/config/secret.key
chown webapp:webapp /app/site/uploads
chmod 770 /app/site/uploads
