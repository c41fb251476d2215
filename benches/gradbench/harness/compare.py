#!/usr/bin/env python3
"""Side-by-side table of GradBench logs of one eval: for each workload, mcc's fastest
run (ms) of the primal and of the derivative, their ratio, whether the eval found mcc's
output valid, the other tools' fastest derivative, and mcc's over the best of theirs. Usage: compare.py EVAL LOGDIR (logs named EVAL_TOOL.jsonl)."""
import json
import os
import sys

DERIVATIVE = {"gmm": "jacobian", "lstm": "jacobian", "lse": "gradient", "llsq": "gradient", "ode": "gradient"}
PRIMAL = {"gmm": "objective", "lstm": "objective", "lse": "primal", "llsq": "primal", "ode": "primal"}


def load(path):
    messages, responses, valid = {}, {}, {}
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            entry = json.loads(line)
            if "message" in entry:
                m = entry["message"]
                messages[m["id"]] = m
                if m.get("kind") == "analysis":
                    valid[m["of"]] = m.get("valid")
            if "response" in entry:
                responses[entry["response"].get("id")] = entry["response"]
    out = {}
    for mid, m in messages.items():
        if m.get("kind") != "evaluate":
            continue
        ts = [t["nanoseconds"] / 1e6 for t in responses.get(mid, {}).get("timings", []) if t.get("name") == "evaluate"]
        out[(m["function"], m.get("description", ""))] = (min(ts) if ts else None, valid.get(mid))
    return out


def merge(rounds):
    """The fastest time of each evaluation over several rounds; valid if valid in all."""
    out = {}
    for r in rounds:
        for key, (t, v) in r.items():
            if key not in out:
                out[key] = (t, v)
                continue
            t0, v0 = out[key]
            times = [x for x in (t0, t) if x is not None]
            out[key] = (min(times) if times else None, v0 if v is None else (v if v0 is None else v0 and v))
    return out


def main():
    name, logdirs = sys.argv[1], sys.argv[2:]
    tools = [t for t in ("mcc", "manual", "tapenade") if os.path.exists(f"{logdirs[0]}/{name}_{t}.jsonl")]
    logs = {t: merge([load(f"{d}/{name}_{t}.jsonl") for d in logdirs if os.path.exists(f"{d}/{name}_{t}.jsonl")]) for t in tools}
    workloads = [d for (fn, d) in logs["mcc"] if fn == DERIVATIVE[name]]
    others = [t for t in tools if t != "mcc"]
    head = ["workload", "mcc primal", "mcc derivative", "derivative / primal", "mcc valid"]
    head += [f"{t} derivative" for t in others] + ["mcc / best"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    fmt = lambda x: "—" if x is None else f"{x:.3g}"
    for w in workloads:
        p = logs["mcc"].get((PRIMAL[name], w), (None, None))[0]
        d, v = logs["mcc"].get((DERIVATIVE[name], w), (None, None))
        theirs = [logs[t].get((DERIVATIVE[name], w), (None, None))[0] for t in others]
        best = min([x for x in theirs if x is not None], default=None)
        ratio = "—" if best is None or d is None else f"{d / best:.2f}"
        own = "—" if p is None or d is None else f"{d / p:.2f}"
        print("| " + " | ".join([w, fmt(p), fmt(d), own, str(v)] + [fmt(x) for x in theirs] + [ratio]) + " |")


main()
