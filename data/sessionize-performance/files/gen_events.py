"""Deterministic generator of click-stream events (used at build time and by the verifier).

rows(seed, n_users) returns a shuffled list of (user_id, ts, action) tuples; write() stores them as CSV.
"""
import random
import sys

ACTIONS = ["view", "view", "view", "click", "click", "buy"]


def rows(seed=1, n_users=20000):
    rng = random.Random(seed)
    out = []
    for u in range(n_users):
        user = f"user{rng.randrange(10 ** 7)}"  # not zero padded: string order != numeric order
        ts = 1_700_000_000 + rng.randrange(30 * 86400)
        if rng.random() < 0.02:  # users that only ever send heartbeats
            out.extend((user, ts + 60 * k, "heartbeat") for k in range(rng.randint(1, 3)))
            continue
        for _ in range(rng.randint(1, 3)):  # bursts
            for _ in range(rng.randint(1, 6)):
                out.append((user, ts, rng.choice(ACTIONS)))
                if rng.random() < 0.25:
                    out.append((user, ts + rng.randint(0, 3000), "heartbeat"))
                ts += rng.choice([0, 5, 60, 600, 1799, 1800, 1801, 2500])
            ts += rng.randint(3600, 5 * 86400)
    rng.shuffle(out)
    return out


def write(path, seed=1, n_users=20000):
    with open(path, "w") as f:
        f.write("user_id,ts,action\n")
        for user, ts, action in rows(seed, n_users):
            f.write(f"{user},{ts},{action}\n")


if __name__ == "__main__":
    write(sys.argv[1])
