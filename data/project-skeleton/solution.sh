#!/bin/bash
# Reference solution: build the layout with plain shell commands.
set -euo pipefail
mkdir -p /app/widget/src/widget /app/widget/docs /app/widget/tests /app/widget/bin
cd /app/widget
printf '__version__ = "0.3.1"\n' > src/widget/__init__.py
printf '# widget\n\nA tiny example package.\n' > README.md
ln -sfn ../README.md docs/index.md
: > tests/.gitkeep
cat > bin/widget <<'SH'
#!/bin/sh
echo "widget 0.3.1"
SH
chmod 755 bin/widget
