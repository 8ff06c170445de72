#!/usr/bin/env python3
"""Summary of a scripts/peer_tests.sh run.

  summarize.py RESULTS.jsonl EXCEPTIONS.txt OUT.json

Prints passed / failed / skipped / not-collected per suite, then every failed or not-collected
test with its reason, annotated with the known exception it matches (tests/peer/exceptions.txt)
or UNEXPLAINED, and the skips grouped by reason. Writes OUT.json: {"counts": {suite: {outcome:
n}}, "tests": [{suite, id, outcome, reason, seconds, exception}]}. Exit 0 when every failure and
every not-collected file matches an exception, else 1. An exception only annotates: the test
still counts as failed.

EXCEPTIONS.txt: one exception a line, `SUITE::ID-GLOB | CATEGORY | why` (fnmatch glob on the
test id; # starts a comment).
"""
import collections
import fnmatch
import json
import sys

OUTCOMES = ("passed", "failed", "skipped", "not-collected")


def load_exceptions(path):
    rules = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip() if not line.lstrip().startswith("#") else ""
            if not line:
                continue
            parts = [p.strip() for p in line.split("|", 2)]
            if len(parts) != 3:
                sys.exit("exceptions: bad line: " + line)
            rules.append(tuple(parts))
    return rules


def match(rules, suite, test_id):
    key = suite + "::" + test_id
    for glob, category, why in rules:
        if fnmatch.fnmatchcase(key, glob):
            return "%s: %s" % (category, why)
    return None


def main():
    results_path, exceptions_path, out_path = sys.argv[1:4]
    rules = load_exceptions(exceptions_path)
    tests = []
    with open(results_path) as f:
        for line in f:
            if line.strip():
                tests.append(json.loads(line))
    counts = collections.OrderedDict()
    unexplained = 0
    for t in tests:
        c = counts.setdefault(t["suite"], collections.Counter())
        c[t["outcome"]] += 1
        t["exception"] = None
        if t["outcome"] in ("failed", "not-collected"):
            t["exception"] = match(rules, t["suite"], t["id"])
            unexplained += t["exception"] is None
    with open(out_path, "w") as f:
        json.dump({"counts": {s: {o: c[o] for o in OUTCOMES} for s, c in counts.items()},
                   "tests": tests}, f, indent=1)

    for suite, c in counts.items():
        bad = [t for t in tests if t["suite"] == suite and t["outcome"] in ("failed",
                                                                              "not-collected")]
        print("\n== %s: %d passed, %d failed, %d skipped, %d not collected" % (
            suite, c["passed"], c["failed"], c["skipped"], c["not-collected"]))
        for t in bad:
            note = t["exception"] or "UNEXPLAINED"
            print("  %-13s %s\n                %s\n                [%s]" % (
                t["outcome"].upper(), t["id"], t["reason"][:240], note))
        skips = collections.Counter(t["reason"][:110] for t in tests
                                    if t["suite"] == suite and t["outcome"] == "skipped")
        if skips:
            print("  skipped, by reason:")
            for reason, n in skips.most_common():
                print("    %4d  %s" % (n, reason))
    print("\npeer_tests: %d failures or uncollected files not in tests/peer/exceptions.txt; "
          "results: %s" % (unexplained, out_path))
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
