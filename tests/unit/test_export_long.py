"""The long format (one row per cell x metric, a column per parameter) as CSV and Parquet,
`isotax.load()` on a run id and on a bundle, results.csv's parameter columns, and the one line
a missing pandas gives."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from support import long_store

import isotax
from isotax import data
from isotax.analysis.long_format import HEAD, TAIL
from isotax.analysis.report_data import analyze
from isotax.cli import main
from isotax.report import csv_report
from isotax.store.bundle import export_bundle

CELLS, ROWS = 26, 74  # long_store's: 3 envs x 2 levels x 4 (3 + a warm-up) x 3 metrics, + 2
PARAMS = ["param_level", "param_proto", "param_seconds", "param_threads"]
HEADER = [*HEAD, *PARAMS, *TAIL]
PANDAS = "pandas and pyarrow are the optional extra: pip install 'isotax[data]'"


def _export(results: Path, run_id: str, fmt: str) -> Path:
    done = CliRunner().invoke(main, ["export", run_id, "--results", str(results), "--format",
                                     fmt])
    assert done.exit_code == 0, done.output
    return Path(done.output.strip().splitlines()[-1])


def test_the_long_table_is_one_row_per_cell_and_metric(tmp_path: Path) -> None:
    store, run_id = long_store(tmp_path)
    t = data.table(store, run_id)
    assert list(t.columns) == HEADER and list(t.param_columns) == PARAMS
    assert len(store.cells(run_id)) == CELLS and len(t.rows) == ROWS
    ok = [r for r in t.rows if r["status"] == "ok"]
    assert len(ok) == 3 * 2 * 4 * 3
    assert {r["metric"] for r in ok} == {"throughput", "ratio", "env_host_cpu_s"}
    assert sum(r["warmup"] for r in t.rows) == 3 * 2 * 3
    assert {r["repetition"] for r in ok} == {1, 2, 3}
    failed = next(r for r in t.rows if r["status"] == "failed")
    assert failed["metric"] is None and failed["value"] is None
    assert failed["reason"] == "SanityError: xz output size differs" and failed["repetition"] == 4
    na = next(r for r in t.rows if r["status"] == "n/a")
    assert na["param_proto"] == "udp" and na["param_seconds"] == 1.5
    assert na["param_level"] is None and na["workload"] == "rr"
    qemu = next(r for r in ok if r["environment"] == "qemu")
    assert qemu["emulated"] is True and qemu["kind"] == "qemu" and qemu["unit"] == "MB/s"
    assert all(r["run_id"] == run_id for r in t.rows)


def test_long_csv_from_the_command(tmp_path: Path) -> None:
    store, run_id = long_store(tmp_path)
    store.close()
    path = _export(tmp_path, run_id, "long")
    assert path == tmp_path / f"{run_id}.long.csv"
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    assert path.read_text().splitlines()[0] == ",".join(HEADER)
    assert len(rows) == ROWS
    assert {r["param_level"] for r in rows} == {"1", "9", ""}
    assert {r["warmup"] for r in rows} == {"True", "False"}
    failed = next(r for r in rows if r["status"] == "failed")
    assert failed["value"] == "" and failed["metric"] == ""


def test_long_csv_and_parquet_load_into_pandas(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas", reason=PANDAS)
    pytest.importorskip("pyarrow", reason=PANDAS)
    store, run_id = long_store(tmp_path)
    store.close()
    # keep_default_na=False: pandas would read the status "n/a" as missing (docs/data.md)
    from_csv = pd.read_csv(_export(tmp_path, run_id, "long"), keep_default_na=False,
                           na_values=[""])
    parquet = _export(tmp_path, run_id, "parquet")
    assert parquet == tmp_path / f"{run_id}.parquet"
    from_parquet = pd.read_parquet(parquet)
    for df in (from_csv, from_parquet):
        assert list(df.columns) == HEADER and len(df) == ROWS
        assert df["warmup"].sum() == 18 and set(df["repetition"]) == {1, 2, 3, 4}
        assert (df.groupby("status").size().to_dict()
                == {"ok": ROWS - 2, "failed": 1, "n/a": 1})
        ok = df[df["status"] == "ok"]
        assert len(ok.groupby(["environment", "param_level", "metric"])) == 3 * 2 * 3
    # Parquet keeps the types the CSV loses: a parameter of integers stays integers (with a
    # missing value for the point without it), timestamps are timestamps.
    assert str(from_parquet["param_level"].dtype) == "Int64"
    assert str(from_parquet["param_seconds"].dtype) == "float64"
    assert str(from_parquet["started"].dtype).startswith("datetime64")
    assert from_parquet["param_level"].isna().sum() == 1


def test_load_a_run_id_and_a_bundle(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas", reason=PANDAS)
    store, run_id = long_store(tmp_path / "results")
    bundle = export_bundle(store, run_id, tmp_path / "elsewhere" / "d1.itx.tar.gz")
    store.close()
    df = isotax.load(run_id, results=tmp_path / "results")
    assert list(df.columns) == HEADER and len(df) == ROWS
    assert str(df["param_level"].dtype) == "Int64" and str(df["param_proto"].dtype) == "string"
    assert df.loc[df["status"] == "ok", "param_level"].tolist().count(9) == 36
    ratio = (df[(df["metric"] == "throughput") & ~df["warmup"]]
             .groupby(["param_level", "environment"])["value"].mean().unstack())
    assert ratio.loc[1, "qemu"] / ratio.loc[1, "native"] == pytest.approx(0.2)
    pd.testing.assert_frame_equal(df, isotax.load(bundle))
    pd.testing.assert_frame_equal(df, isotax.load(run_id[:1], results=tmp_path / "results"))


def test_without_pandas_one_line_says_how(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    store, run_id = long_store(tmp_path)
    store.close()
    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` raises ImportError
    line = ("pandas is not installed: pip install 'isotax[data]' (or .venv/bin/pip install "
            "pandas pyarrow)")
    with pytest.raises(data.MissingExtra) as e:
        isotax.load(run_id, results=tmp_path)
    assert str(e.value) == line
    done = CliRunner().invoke(main, ["export", run_id, "--results", str(tmp_path), "--format",
                                     "parquet"])
    assert done.exit_code == 2 and done.output.strip() == f"isotax: {line}"
    assert not (tmp_path / f"{run_id}.parquet").exists()
    _export(tmp_path, run_id, "long")  # the long CSV needs no pandas


def test_results_csv_has_a_column_per_parameter(tmp_path: Path) -> None:
    store, run_id = long_store(tmp_path)
    text = csv_report.render(analyze(store, run_id))
    header = text.splitlines()[0].split(",")
    # After the packed form, which stays for readers that group by it.
    assert header[2:5] == ["params", "param_level", "param_threads"]
    rows = list(csv.DictReader(io.StringIO(text)))
    assert {(r["params"], r["param_level"], r["param_threads"]) for r in rows} == {
        ("level=1,threads=0", "1", "0"), ("level=9,threads=0", "9", "0")}


def test_the_cli_module_runs_export_long(tmp_path: Path) -> None:
    # The installed command, not only click's runner: the data module imports cleanly.
    store, run_id = long_store(tmp_path)
    store.close()
    done = subprocess.run([sys.executable, "-m", "isotax", "export", run_id, "--results",
                           str(tmp_path), "--format", "long", "--out", str(tmp_path / "x.csv")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len((tmp_path / "x.csv").read_text().splitlines()) == ROWS + 1
