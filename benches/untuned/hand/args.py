"""Writes the arguments of the six programs of this directory as OUT_DIR/NAME.json
(SplitMix64, drawn in the order src/main.rs draws them):

    python3 benches/untuned/hand/args.py OUT_DIR
"""
import json, os, sys

class Rng:
    def __init__(self, seed): self.state = seed
    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        return z ^ (z >> 31)
    def uniform(self, lo, hi): return lo + (hi - lo) * (self.next() >> 11) / float(1 << 53)
    def vector(self, n, lo, hi): return [self.uniform(lo, hi) for _ in range(n)]

def rows(v, m): return [v[i:i + m] for i in range(0, len(v), m)]

N_PIECE = 100_000
N_LSE = 1 << 16
N_FP = 20_000
N_CELLS, STEPS = 1000, 100
GRID = 160
N_INV = 10_000

def args():
    rng = Rng(7)
    out = {}
    out["piecewise_loss"] = [rng.vector(N_PIECE, -2.0, 2.0), rng.vector(N_PIECE, -2.0, 2.0), 1.3]
    out["recursive_lse"] = [rng.vector(N_LSE, -3.0, 3.0), 0.7]
    out["fixed_point"] = [rng.vector(N_FP, 0.02, 0.1), rng.vector(N_FP, -1.0, 1.0)]
    u = rng.vector(N_CELLS, 0.5, 1.5); v = rng.vector(N_CELLS, 0.2, 0.8); k = rng.vector(N_CELLS, 1.5, 2.5)
    out["predator_prey"] = [u, v, k, [1.0, 1.2, 0.8, 0.6, 0.3], STEPS]
    x = []
    for r in range(GRID):
        for c in range(GRID):
            x.append([c + rng.uniform(-0.45, 0.45), r + rng.uniform(-0.45, 0.45)])
    tri = []
    for r in range(GRID - 1):
        for c in range(GRID - 1):
            v00 = r * GRID + c; v01 = v00 + 1; v10 = v00 + GRID; v11 = v10 + 1
            tri.append([v00, v01, v11]); tri.append([v00, v11, v10])
    a0 = rng.vector(len(tri), 0.4, 0.6)
    out["mesh_energy"] = [x, tri, a0]
    out["small_inverse"] = [rows(rng.vector(9 * N_INV, -1.0, 1.0), 9), 4.0, rows(rng.vector(9, -1.0, 1.0), 3)]
    return out

if __name__ == "__main__":
    where = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(where, exist_ok=True)
    for name, a in args().items():
        with open(os.path.join(where, name + ".json"), "w") as f:
            json.dump(a, f)
