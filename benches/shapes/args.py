"""Writes the arguments of the programs of this directory, deterministically, as the
JSON files `mcc bench --args @FILE` reads (NAME.json beside NAME.mcir):

    python3 benches/shapes/args.py [OUT_DIR]

The Rust benchmark (`benches/shapes.rs`) draws the same numbers with the same generator.
"""
import json
import os
import sys


class Rng:
    """SplitMix64, as `benches/shapes.rs` has it."""

    def __init__(self, seed):
        self.state = seed

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        return z ^ (z >> 31)

    def uniform(self, lo, hi):
        return lo + (hi - lo) * (self.next() >> 11) / float(1 << 53)

    def below(self, n):
        return self.next() % n


def vector(rng, n, lo, hi):
    return [rng.uniform(lo, hi) for _ in range(n)]


def matrix(rng, n, m, lo, hi):
    return [vector(rng, m, lo, hi) for _ in range(n)]


def shapes():
    rng = Rng(1)
    out = {}
    out["branchy_helper"] = [vector(rng, 100_000, -1.0, 1.0)]
    out["divide_conquer"] = [vector(rng, 65_536, -1.0, 1.0)]
    out["newton_helper"] = [vector(rng, 100_000, -2.0, 2.0)]
    out["out_array_helper"] = [matrix(rng, 1000, 2, -1.0, 1.0), matrix(rng, 1000, 2, -0.1, 0.1), 100]
    cams = [[rng.uniform(0.8, 1.2), rng.uniform(-0.1, 0.1), rng.uniform(-0.1, 0.1), rng.uniform(4.0, 5.0),
             rng.uniform(-0.1, 0.1)] for _ in range(16)]
    pts = matrix(rng, 1000, 3, -1.0, 1.0)
    n_obs = 100_000
    cam_of = [rng.below(16) for _ in range(n_obs)]
    pt_of = [rng.below(1000) for _ in range(n_obs)]
    obs = matrix(rng, n_obs, 2, -0.3, 0.3)
    out["bundle_adjust"] = [cams, pts, cam_of, pt_of, obs]
    out["determinant"] = [matrix(rng, 8, 8, -1.0, 1.0)]
    return out


if __name__ == "__main__":
    where = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for name, args in shapes().items():
        with open(os.path.join(where, name + ".json"), "w") as f:
            json.dump(args, f)
