"""Benchmarks, one subcommand per concern; each prints ours beside a baseline measured in the same run.

    python bench.py model     # our packed TP=1 Qwen3 vs HF transformers (eager, padded): fwd+bwd time, peak memory
    python bench.py sandbox   # container start, exec round trip, 64 concurrent episodes vs the raw docker SDK
    python bench.py rollout   # batched vs one-at-a-time episodes with a tiny model: tokens/s, episodes/s, time split
    python bench.py train     # training step tokens/s vs HF with the same loss; CPU demo step-time split

Targets live in the issues and README; nothing here asserts, it only measures and prints ratios.
"""
import argparse


def bench_model(args):
    raise NotImplementedError("bench.py model: not written yet")


def bench_sandbox(args):
    raise NotImplementedError("bench.py sandbox: not written yet")


def bench_rollout(args):
    raise NotImplementedError("bench.py rollout: not written yet")


def bench_train(args):
    raise NotImplementedError("bench.py train: not written yet")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("concern", choices=["model", "sandbox", "rollout", "train"])
    parser.add_argument("--repeats", type=int, default=5, help="timed repetitions per measurement")
    args = parser.parse_args()
    {"model": bench_model, "sandbox": bench_sandbox, "rollout": bench_rollout, "train": bench_train}[args.concern](args)


if __name__ == "__main__":
    main()
