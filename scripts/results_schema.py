"""Write results.json's JSON Schema, generated from isotax.report.results_model, to the
checked-in src/isotax/report/schema/results.schema.json; with --check, only say whether the
checked-in file is the generated one (exit 1 when not). Run it after changing a model:

    .venv/bin/python scripts/results_schema.py [--check]
"""

from __future__ import annotations

import sys

from isotax.report.results_model import SCHEMA_PATH, schema_text


def main(argv: list[str]) -> int:
    text = schema_text()
    if "--check" in argv:
        same = SCHEMA_PATH.is_file() and SCHEMA_PATH.read_text(encoding="utf-8") == text
        words = "up to date" if same else "differs from the models; rerun without --check"
        print(f"{SCHEMA_PATH}: {words}")
        return 0 if same else 1
    SCHEMA_PATH.write_text(text, encoding="utf-8")
    print(f"{SCHEMA_PATH}: {len(text.encode())} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
