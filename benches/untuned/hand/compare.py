"""Compares rust_grad/NAME.json (written by `untuned_hand check rust_grad`) with
mcc_grad/NAME.json (`mcc grad` on the same arguments), in the current directory:

    python3 compare.py NAME ...
"""
import json, sys

def flat(g, out):
    if g is None: return
    if isinstance(g, list):
        for e in g: flat(e, out)
    else: out.append(float(g))

for name in sys.argv[1:]:
    mname = name.replace("_ift", "")
    r = json.load(open(f"rust_grad/{name}.json")); m = json.load(open(f"mcc_grad/{mname}.json"))
    a, b = [], []
    flat(r["gradient"], a); flat(m["gradient"], b)
    assert len(a) == len(b), (name, len(a), len(b))
    scale = max(abs(x) for x in b)
    worst_rel = max(abs(x - y) / max(abs(y), 1e-300) for x, y in zip(a, b) if abs(y) > 1e-6 * scale)
    worst_norm = max(abs(x - y) for x, y in zip(a, b)) / scale
    nulls_r = [g is None for g in r["gradient"]]; nulls_m = [g is None for g in m["gradient"]]
    print(f"{name:18s} n={len(a):7d} value rel diff {abs(r['value']-m['value'])/abs(m['value']):.1e}  "
          f"max elementwise rel {worst_rel:.1e}  max |diff|/max|g| {worst_norm:.1e}  nulls equal {nulls_r == nulls_m}")
