"""The unit room: no root, no runtime, no network namespace, nothing started. Parsers on
tests/data, plan validation, statistics, analysis and reports from stored data, command lines
as golden strings, and the CLI where it needs none of these. Runs anywhere as an ordinary
user (`pytest tests/unit`). A package so that a module may share its name with one in
tests/integration."""
