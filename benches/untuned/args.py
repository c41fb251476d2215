"""Writes the arguments of the programs of this directory, deterministically, as the
JSON files `mcc bench --args @FILE` reads (NAME.json):

    python3 benches/untuned/args.py OUT_DIR

These programs were written after a change to check it on code of the same class that
it was not tuned on; `docs/performance.md` gives their figures.
"""
import json
import os
import random
import sys


def args():
    rng = random.Random(5)
    u = rng.uniform
    out = {}
    out["matvec_rows"] = [[[u(-1, 1) for _ in range(300)] for _ in range(300)], [u(-1, 1) for _ in range(300)]]
    n, m, steps = 64, 16, 50
    out["rnn_loops"] = [
        [[u(-0.2, 0.2) for _ in range(n)] for _ in range(n)],
        [[u(-0.3, 0.3) for _ in range(m)] for _ in range(n)],
        [[u(-1, 1) for _ in range(m)] for _ in range(steps)],
        [u(-0.5, 0.5) for _ in range(n)],
    ]
    out["correlate"] = [[u(-1, 1) for _ in range(20000)], [u(-0.5, 0.5) for _ in range(9)], [u(-0.5, 0.5) for _ in range(5)]]
    # All roots negative: positive coefficients, and Horner's rule well conditioned.
    out["poly_tree"] = [[u(-1.2, -0.1) for _ in range(512)], 0.45]
    out["rotations"] = [[[u(-3, 3), u(-3, 3), u(-1, 1), u(-1, 1), u(-1, 1)] for _ in range(10000)], [0.1, -0.2, 0.3]]
    # Off-diagonal entries small beside the diagonal's shift: well conditioned.
    out["normalised_rows"] = [[[u(-1, 1) for _ in range(6)] for _ in range(20000)], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]]
    out["inverse_loops"] = [[[u(-0.35, 0.35) for _ in range(9)] for _ in range(10000)], 2.0, [1.0, -2.0, 0.5]]
    out["banded_costs"] = [[[u(-2, 2), u(0, 10), u(0, 16)] for _ in range(40000)], 2.0, [0.3, 0.5, 0.7]]
    out["reaction_cells"] = [[u(0.5, 1.5) for _ in range(4000)], [u(1, 3) for _ in range(4000)], [u(0.8, 1.2) for _ in range(4000)], [1.0, 0.2, 2.0, 0.05], 50]
    out["matrix_tree"] = [[u(-0.3, 0.3) for _ in range(65536)]]
    out["inverse_pairs"] = [[[u(-0.35, 0.35) for _ in range(9)] for _ in range(10000)], 2.0, [[u(-1, 1) for _ in range(3)] for _ in range(3)]]
    return out


if __name__ == "__main__":
    where = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(where, exist_ok=True)
    for name, a in args().items():
        with open(os.path.join(where, name + ".json"), "w") as f:
            json.dump(a, f)
