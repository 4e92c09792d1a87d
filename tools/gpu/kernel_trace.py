#!/usr/bin/env python3
"""Per-kernel critical-path costs of a replayed decode step.

Reads the CSV that libstrata_kernel_trace.so (tools/gpu/kernel_trace.cc) writes,
takes the CUDA graph launched most often (the decode step a benchmark replays),
and reports for every kernel how far it moved the step's latest end (its
frontier cost; the costs add up to the step's span). With PDL a kernel starts
before its predecessor ends, so its own end − start is not what it costs the
step; the frontier cost is. Costs are medians over the launches.

Usage: kernel_trace.py TRACE.csv [--skip N] [--list A:B]
"""
import argparse
import collections
import csv
import re
import statistics
import sys


def short(name):
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"\(anonymous namespace\)::", "", name)
    name = re.sub(r"strata::cuda::", "", name)
    name = re.sub(r"__nv_bfloat16", "bf16", name)
    name = re.sub(r"strata::", "", name)
    return name[:70]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--skip", type=int, default=2, help="launches to drop at the start (warm-up)")
    ap.add_argument("--list", default="", help="print main-stream kernels A:B of the step")
    args = ap.parse_args()

    launches = collections.defaultdict(list)
    graph_of = {}
    with open(args.trace) as f:
        for r in csv.DictReader(f):
            if r["graph"] == "0":
                continue
            key = int(r["correlation"])
            launches[key].append(r)
            graph_of[key] = r["graph"]
    if not launches:
        sys.exit("no graph-launched kernels in the trace")
    count = collections.Counter(graph_of.values())
    graph = count.most_common(1)[0][0]
    keys = sorted(k for k in launches if graph_of[k] == graph)[args.skip:]
    print(f"graph {graph}: {len(keys)} launches used, {len(launches[keys[0]])} kernels each")

    steps = []
    for k in keys:
        rows = sorted(launches[k], key=lambda r: int(r["start_ns"]))
        steps.append(rows)
    spans = [int(max(int(r["end_ns"]) for r in rows)) - int(rows[0]["start_ns"]) for rows in steps]
    print(f"step span (first start to last end): median {statistics.median(spans) / 1e3:.1f} us, "
          f"min {min(spans) / 1e3:.1f}, max {max(spans) / 1e3:.1f}")
    n = len(steps[0])
    if any(len(rows) != n for rows in steps):
        sys.exit("launches differ in their kernel count")

    # Frontier cost: kernels in order of their end; each moves the step's
    # latest end by cost. Graph replays give kernels their own internal
    # streams, so branches are not told apart; a side kernel that ends inside
    # a long main-stream kernel takes part of that kernel's cost.
    def frontier(rows):
        t0 = int(rows[0]["start_ns"])
        order = sorted(range(len(rows)), key=lambda i: int(rows[i]["end_ns"]))
        cost = [0] * len(rows)
        last = t0
        for i in order:
            e = int(rows[i]["end_ns"])
            cost[i] = max(0, e - last)
            last = max(last, e)
        return cost

    per_step = [frontier(rows) for rows in steps]
    cost = [statistics.median(c[i] for c in per_step) for i in range(n)]
    dur = [statistics.median(int(rows[i]["end_ns"]) - int(rows[i]["start_ns"]) for rows in steps)
           for i in range(n)]
    ref = steps[0]
    by_name = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for i, r in enumerate(ref):
        key = f"{short(r['name'])} grid={r['grid']}x{r['block']}"
        e = by_name[key]
        e[0] += 1
        e[1] += cost[i]
        e[2] += dur[i]
    print(f"{n} kernels per step, sum of frontier costs {sum(cost) / 1e3:.1f} us")
    print(f"{'kernel':<90} {'n':>4} {'cost us':>9} {'per':>7} {'dur per':>8}")
    for key, (cnt, c, d) in sorted(by_name.items(), key=lambda kv: -kv[1][1]):
        print(f"{key:<90} {cnt:>4} {c / 1e3:>9.1f} {c / cnt / 1e3:>7.2f} {d / cnt / 1e3:>8.2f}")

    if args.list:
        a, b = (int(v) for v in args.list.split(":"))
        t0 = int(ref[0]["start_ns"])
        print(f"kernels {a}..{b - 1} in start order (times from the step's start, first launch used)")
        for i in range(a, min(b, n)):
            r = ref[i]
            print(f"{i:>4} start {(int(r['start_ns']) - t0) / 1e3:>8.2f} end "
                  f"{(int(r['end_ns']) - t0) / 1e3:>8.2f} cost {cost[i] / 1e3:>6.2f} "
                  f"{short(r['name'])} grid={r['grid']}x{r['block']}")


if __name__ == "__main__":
    main()
