#!/usr/bin/env python3
"""Reads the per-CTA records a STRATA_CTA_PROBE build writes (cta_probe.cuh).

Build with -DSTRATA_CTA_PROBE=ON, run with STRATA_OPTIONS=cuda.cta_probe=out.csv, then
  python3 tools/gpu/cta_probe.py out.csv                 # the slots, a line each
  python3 tools/gpu/cta_probe.py out.csv --slots A:B     # slots A..B-1 as a timeline
One slot is one probed launch as enqueued (a node of a captured graph keeps
its slot; the file holds the last replay). For each slot of the timeline:
its CTAs' start, after-wait and end times (µs from slot A's first start:
first, 90th percentile, last), how many SMs it ran on, how many CTAs each of
those SMs took, and the end time of the SMs by that count.
"""
import argparse
import collections
import csv


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("records")
    ap.add_argument("--slots", help="A:B, the slots to show as a timeline")
    args = ap.parse_args()
    slots = collections.OrderedDict()
    with open(args.records) as f:
        for r in csv.DictReader(f):
            if int(r["t2"]) == 0:
                continue  # a CTA that never wrote (a slot not replayed)
            slots.setdefault(int(r["slot"]), []).append(r)
    if not args.slots:
        for k, rs in slots.items():
            print(f"{k:5d} {rs[0]['tag']:28s} ctas {len(rs)}")
        return
    a, b = (int(x) for x in args.slots.split(":"))
    shown = [k for k in slots if a <= k < b]
    if not shown:
        raise SystemExit("no slot with records in that range")
    base = min(int(r["t0"]) for r in slots[shown[0]])
    us = lambda v: (int(v) - base) / 1000.0
    for k in shown:
        rs = slots[k]
        t0 = [us(r["t0"]) for r in rs]
        t1 = [us(r["t1"]) for r in rs]
        t2 = [us(r["t2"]) for r in rs]
        per_sm = collections.defaultdict(list)
        for r in rs:
            per_sm[int(r["smid"])].append(us(r["t2"]))
        by_count = collections.defaultdict(list)
        for ends in per_sm.values():
            by_count[len(ends)].append(max(ends))
        dist = " ".join(
            f"{n}/SM:{len(v)} SMs end {pct(v, 0.5):.2f}" for n, v in sorted(by_count.items()))
        print(f"{k:5d} {rs[0]['tag']:28s} n={len(rs):5d} "
              f"start {min(t0):8.2f} p90 {pct(t0, 0.9):8.2f} last {max(t0):8.2f} | "
              f"waited {min(t1):8.2f} .. {max(t1):8.2f} | "
              f"end {min(t2):8.2f} p90 {pct(t2, 0.9):8.2f} last {max(t2):8.2f} | "
              f"{len(per_sm)} SMs, {dist}")


if __name__ == "__main__":
    main()
