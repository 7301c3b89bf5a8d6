#!/bin/bash
# Reference solution: rewrite the Makefile, fix the comparator and the even-count median.
set -euo pipefail
cd /app/stats
printf '%s\n' \
  'CC = gcc' \
  'CFLAGS = -O2 -Wall' \
  'OBJS = main.o stats.o' \
  '' \
  'stats: $(OBJS)' \
  '	$(CC) $(CFLAGS) -o stats $(OBJS) -lm' \
  '' \
  '%.o: %.c stats.h' \
  '	$(CC) $(CFLAGS) -c $<' \
  '' \
  '.PHONY: clean' \
  'clean:' \
  '	rm -f stats *.o' > Makefile
python3 - <<'PY'
path = "stats.c"
src = open(path).read()
src = src.replace(
    "    return (int)(*(const double *)a - *(const double *)b);",
    "    double x = *(const double *)a, y = *(const double *)b;\n    return (x > y) - (x < y);")
src = src.replace(
    "    double result = sorted[n / 2];",
    "    double result = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0;")
open(path, "w").write(src)
PY
make
