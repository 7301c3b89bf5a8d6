#!/bin/bash
# Reference solution: walk backups newest first, mark keepers by both rules, delete the rest.
set -euo pipefail
cat > /app/rotate_backups.sh <<'SH'
#!/bin/bash
# rotate_backups.sh [-n] DIR DAILY WEEKLY: keep the DAILY newest backups plus the newest backup of
# each of the WEEKLY most recent ISO weeks; delete (or with -n only list) the others.
set -u
usage() { echo "usage: rotate_backups.sh [-n] DIR DAILY WEEKLY ($1)" >&2; exit 2; }

dry_run=0
if [ "${1-}" = "-n" ]; then dry_run=1; shift; fi
[ $# -eq 3 ] || usage "expected 3 arguments"
dir=$1 daily=$2 weekly=$3
[[ $daily =~ ^[0-9]+$ ]] || usage "DAILY must be a non-negative integer"
[[ $weekly =~ ^[0-9]+$ ]] || usage "WEEKLY must be a non-negative integer"
[ -d "$dir" ] || usage "not a directory: $dir"
daily=$((10#$daily)) weekly=$((10#$weekly))

backups=()
while IFS= read -r name; do
  [ -n "$name" ] && backups+=("$name")
done < <(cd "$dir" && for f in backup-*.tar.gz; do
           if [[ $f =~ ^backup-[0-9]{4}-[0-9]{2}-[0-9]{2}\.tar\.gz$ && -f $f && ! -L $f ]]; then echo "$f"; fi
         done | LC_ALL=C sort -r)

declare -A keep=() seen_week=()
position=0 weeks=0
for name in "${backups[@]}"; do
  if (( position < daily )); then keep[$name]=1; fi
  position=$((position + 1))
  week=$(date -d "${name:7:10}" +%G-%V)
  if [ -z "${seen_week[$week]-}" ]; then
    seen_week[$week]=1
    weeks=$((weeks + 1))
    if (( weeks <= weekly )); then keep[$name]=1; fi
  fi
done

for name in "${backups[@]}"; do
  [ -n "${keep[$name]-}" ] || echo "$name"
done | LC_ALL=C sort | while IFS= read -r name; do
  echo "$name"
  if [ "$dry_run" = 0 ]; then rm -f -- "$dir/$name"; fi
done
exit 0
SH
chmod 755 /app/rotate_backups.sh
