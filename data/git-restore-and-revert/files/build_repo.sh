#!/bin/bash
# Build-time script: creates /app/repo with a fixed history (fixed dates, so hashes are stable).
set -euo pipefail
git config --global user.name "Build Bot"
git config --global user.email "build@example.invalid"
git config --global init.defaultBranch main
mkdir -p /app/repo && cd /app/repo
git init -q
commit() {  # commit MESSAGE DAY
  GIT_AUTHOR_DATE="2024-03-$2T10:00:00+00:00" GIT_COMMITTER_DATE="2024-03-$2T10:00:00+00:00" \
    git commit -q -m "$1"
}
mkdir -p config
cat > README.md <<'TXT'
# meter

Reads pulse counts from a serial meter and prints kWh.
TXT
cat > app.py <<'TXT'
import configparser

DEBUG = False


def load_settings(path="config/settings.ini"):
    parser = configparser.ConfigParser()
    parser.read(path)
    return parser["meter"]


def kwh(pulses, settings):
    return pulses / int(settings["pulses_per_kwh"])
TXT
cat > config/settings.ini <<'TXT'
[meter]
device = /dev/ttyUSB0
baud = 9600
pulses_per_kwh = 1000
TXT
git add -A && commit "Initial commit" 01
cat > logging_helper.py <<'TXT'
def log(message, debug=False):
    if debug:
        print(f"[debug] {message}")
TXT
git add -A && commit "Add logging helper" 02
git rm -q config/settings.ini && commit "Remove unused settings" 03
sed -i 's/^DEBUG = False$/DEBUG = True/' app.py
git add -A && commit "Enable debug mode" 04
cat >> README.md <<'TXT'

Run `python3 -c "import app"` to check the module imports.
TXT
git add -A && commit "Document import check" 05
