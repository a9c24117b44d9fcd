"""results.json's published JSON Schema: the checked-in file is the one the models generate,
and the report's output validates against it (jsonschema, the dev extra)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pydantic
import pytest
from support import figure_store, long_store

from isotax.analysis.report_data import analyze
from isotax.model import FORMAT_VERSION
from isotax.report import json_report, results_model

REGENERATE = "regenerate it: .venv/bin/python scripts/results_schema.py"


def _checked_in() -> dict[str, Any]:
    return json.loads(results_model.SCHEMA_PATH.read_text(encoding="utf-8"))


def _validator() -> jsonschema.Draft202012Validator:
    schema = _checked_in()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_checked_in_schema_is_the_models() -> None:
    # Byte for byte: a model changed without regenerating the file fails here.
    text = results_model.SCHEMA_PATH.read_text(encoding="utf-8")
    assert text == results_model.schema_text(), f"results.schema.json is stale; {REGENERATE}"


def test_the_schema_is_versioned_with_the_format() -> None:
    schema = _checked_in()
    assert schema["$id"] == f"urn:isotax:results:{FORMAT_VERSION}"
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["properties"]["format_version"]["const"] == FORMAT_VERSION
    assert schema["additionalProperties"] is False  # a key the schema lacks is invalid
    # Shipped with the package, beside the code that writes results.json.
    assert results_model.SCHEMA_PATH.parent.name == "schema"


@pytest.mark.parametrize("build", [long_store, figure_store], ids=["long", "figures"])
def test_results_json_validates_against_the_schema(build: Any, tmp_path: Path) -> None:
    store, run_id = build(tmp_path)
    doc = json.loads(json_report.render(analyze(store, run_id)))
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in _validator().iter_errors(doc)]
    assert errors == [], f"results.json and its schema disagree ({REGENERATE}?)"
    # The run's parts that are optional or empty elsewhere are here, so they were checked too.
    assert doc["verdicts"] is not None and doc["results"]
    if build is long_store:
        assert doc["phases"] is not None
        assert doc["failures"] and doc["not_applicable"] and doc["warmups"]
        assert doc["explained"] and doc["environment_cpu"]
    else:
        assert doc["latency_cdfs"]


def test_drift_fails_the_model_and_the_schema(tmp_path: Path) -> None:
    store, run_id = long_store(tmp_path)
    doc = json.loads(json_report.render(analyze(store, run_id)))
    drifted = [{**doc, "adaptive": None},  # a key the renderer added without the model
               {k: v for k, v in doc.items() if k != "warmups"},  # one it dropped
               {**doc, "results": [{**doc["results"][0], "n": "3"}]},  # a type changed
               {**doc, "format_version": FORMAT_VERSION + 1}]
    validator = _validator()
    for bad in drifted:
        assert not validator.is_valid(bad)
    for bad in drifted[:2]:  # render passes its document through the model
        with pytest.raises(pydantic.ValidationError):
            results_model.document(bad)


def test_the_model_keeps_the_documents_order_and_values(tmp_path: Path) -> None:
    store, run_id = long_store(tmp_path)
    doc = json.loads(json_report.render(analyze(store, run_id)))
    assert list(doc) == list(results_model.ResultsDocument.model_fields)
    assert doc["results"][0]["values"] and doc["format_version"] == FORMAT_VERSION
