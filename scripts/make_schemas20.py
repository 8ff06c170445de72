#!/usr/bin/env python3
"""Writes bench/schemas/schemas20.json: the JSON schemas of the twenty pydantic models of
tests/server/e2e/schemas20.py, in the strict form the openai client sends for
client.chat.completions.parse(response_format=Model) (openai.lib._pydantic.to_strict_json_schema),
each as {"name", "schema"} in the models' order. A benchmark of structured outputs (and the e2e
tests) use the same twenty.

Usage (any python with pydantic and openai, e.g. the e2e venv of scripts/setup_e2e.sh):
    "$(scripts/setup_e2e.sh | tail -n 1)" scripts/make_schemas20.py [--out bench/schemas/schemas20.json]
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "server", "e2e"))

from openai.lib._pydantic import to_strict_json_schema  # noqa: E402

import schemas20  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "schemas", "schemas20.json"))
    args = parser.parse_args()
    out = {
        "generator": "scripts/make_schemas20.py",
        "source": "tests/server/e2e/schemas20.py (pydantic models), openai to_strict_json_schema",
        "schemas": [{"name": m.__name__, "schema": to_strict_json_schema(m)} for m in schemas20.MODELS],
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
