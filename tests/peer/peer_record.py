"""pytest plugin (-p peer_record) of scripts/peer_tests.sh: appends one JSON line per test to
$PEER_RESULTS: {"suite", "id", "outcome", "reason", "seconds"}.

outcome: passed, failed (the call, or a setup/teardown error), skipped (pytest skip or xfail;
never a pass), or not-collected (the test file could not be imported: one line for the file,
its id the file's path). reason: the skip reason, or the last line of the failure (the
assertion or exception), at most 300 characters.
"""
import json
import os

import pytest

_RESULTS = os.environ.get("PEER_RESULTS", "")
_SUITE = os.environ.get("PEER_SUITE", "")
_state = {}


def _short(report):
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple):  # a skip: (path, line, reason)
        return str(longrepr[2])[:300]
    crash = getattr(getattr(longrepr, "reprcrash", None), "message", None)
    text = crash if crash else str(longrepr)
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    if not crash:  # a collection error: its "E   ..." lines hold the exception
        lines = [l[1:].strip() for l in lines if l.startswith("E ")] or lines
    return (lines[0] if crash and lines else (lines[-1] if lines else ""))[:300]


def _write(entry):
    if not _RESULTS:
        return
    entry["suite"] = _SUITE
    with open(_RESULTS, "a") as f:
        f.write(json.dumps(entry) + "\n")


def pytest_runtest_logreport(report):
    st = _state.setdefault(report.nodeid, {"outcome": None, "reason": "", "seconds": 0.0})
    st["seconds"] += getattr(report, "duration", 0.0)
    if report.when == "setup":
        if report.failed:
            st.update(outcome="failed", reason="setup: " + _short(report))
        elif report.skipped:
            st.update(outcome="skipped", reason=_short(report))
    elif report.when == "call":
        if hasattr(report, "wasxfail"):
            st.update(outcome="skipped", reason="xfail: " + str(report.wasxfail)[:280])
        elif report.failed:
            st.update(outcome="failed", reason=_short(report))
        elif report.skipped:
            st.update(outcome="skipped", reason=_short(report))
        else:
            st.update(outcome="passed")
    elif report.when == "teardown":
        if report.failed and st["outcome"] != "failed":
            st.update(outcome="failed", reason="teardown: " + _short(report))
        _write({"id": report.nodeid, "outcome": st["outcome"] or "failed",
                "reason": st["reason"], "seconds": round(st["seconds"], 2)})
        _state.pop(report.nodeid, None)


def pytest_collectreport(report):
    if report.failed:
        _write({"id": report.nodeid, "outcome": "not-collected",
                "reason": _short(report), "seconds": 0.0})
