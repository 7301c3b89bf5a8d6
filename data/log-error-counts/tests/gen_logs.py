"""Deterministic generator of the rotated service logs (used at build time and by the verifier).

generate() returns {file name: text}; names ending in .gz are written gzip-compressed.
"""
import datetime
import gzip
import os
import random
import sys

SERVICES = ["api", "auth", "billing", "worker", "scheduler", "search"]
# relative weight of ERROR lines per service (chosen so that some services tie)
ERROR_WEIGHT = {"api": 5, "auth": 2, "billing": 3, "worker": 3, "scheduler": 0, "search": 1}
MESSAGES = {
    "DEBUG": ["cache lookup key={k}", "pool stats idle={n}"],
    "INFO": ["request served in {n}ms", "retry succeeded after ERROR {code}", "job {k} finished",
             "user login ok"],
    "WARN": ["slow query took {n}ms", "queue depth {n} above soft limit", "deprecated flag used"],
    "ERROR": ["upstream timeout after {n}ms", "database connection refused", "payload rejected: {k}"],
}
TRACE = ["Traceback (most recent call last):", '  File "handler.py", line {n}, in run',
         "    raise ERROR_UPSTREAM", "ERROR_UPSTREAM: upstream said ERROR {code}"]


def generate(seed=20240514):
    rng = random.Random(seed)
    clock = datetime.datetime(2024, 5, 14, 0, 0, 0)
    files = {}
    for name, n_lines in (("app.log.2.gz", 700), ("app.log.1", 900), ("app.log", 800)):
        out = []
        for _ in range(n_lines):
            clock += datetime.timedelta(milliseconds=rng.randint(50, 9000))
            service = rng.choice(SERVICES)
            roll = rng.random()
            if roll < 0.012 * ERROR_WEIGHT[service]:
                level = "ERROR"
            elif roll < 0.15:
                level = "WARN"
            elif roll < 0.30:
                level = "DEBUG"
            else:
                level = "INFO"
            message = rng.choice(MESSAGES[level]).format(
                n=rng.randint(1, 5000), k=f"k{rng.randint(100, 999)}", code=rng.choice([500, 502, 503]))
            stamp = clock.strftime("%Y-%m-%dT%H:%M:%S.") + f"{clock.microsecond // 1000:03d}Z"
            out.append(f"{stamp} {level} {service}: {message}")
            if level == "ERROR" and rng.random() < 0.5:
                for line in TRACE:
                    out.append("    " + line.format(n=rng.randint(10, 400), code=rng.choice([500, 503])))
        files[name] = "\n".join(out) + "\n"
    return files


def write(directory):
    os.makedirs(directory, exist_ok=True)
    for name, text in generate().items():
        path = os.path.join(directory, name)
        if name.endswith(".gz"):
            with gzip.GzipFile(path, "wb", mtime=0) as f:
                f.write(text.encode())
        else:
            with open(path, "w") as f:
                f.write(text)


if __name__ == "__main__":
    write(sys.argv[1])
