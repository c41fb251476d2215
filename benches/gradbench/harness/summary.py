#!/usr/bin/env python3
"""Summarises GradBench logs: per evaluation, the function, the workload, whether the
eval found the output valid, and the mean and minimum of the `evaluate` timings (ms).
Usage: summary.py LOG.jsonl [LOG.jsonl ..]"""
import json
import sys

for path in sys.argv[1:]:
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
    print(path)
    for mid, m in sorted(messages.items()):
        r = responses.get(mid, {})
        if m.get("kind") == "define":
            ts = [round(t["nanoseconds"] / 1e6, 2) for t in r.get("timings", [])]
            print(f"  define {m.get('module')}: success={r.get('success')} ms={ts} {r.get('error', '')}")
        elif m.get("kind") == "evaluate":
            ts = [t["nanoseconds"] / 1e6 for t in r.get("timings", []) if t.get("name") == "evaluate"]
            mean = sum(ts) / len(ts) if ts else float("nan")
            low = min(ts) if ts else float("nan")
            extra = "" if r.get("success", False) else f" error={r.get('error', '')[:200]}"
            print(f"  {m['function']:>10} {m.get('description', ''):>16} valid={valid.get(mid)} "
                  f"runs={len(ts)} mean={mean:.4f} min={low:.4f}{extra}")
