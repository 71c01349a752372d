"""``fedod-coordinator study template`` and spec errors as an operator sees them."""

from __future__ import annotations

from coordinator.cli.main import EXIT_OK, EXIT_REFUSED, main


def test_template_reads_the_header_only_and_create_explains_placeholders(env, capsys):
    data = env / "wine.csv"
    data.write_text("alcohol,ash,label\n13.2,2.4,0\n99999,2.1,1\n")
    spec = env / "study.json"
    assert main(["study", "template", str(data), "--study-id", "wine", "-o", str(spec)]) == EXIT_OK
    assert "fill in every PUBLIC_LOWER_BOUND" in capsys.readouterr().err
    text = spec.read_text()
    assert '"name": "alcohol"' in text and '"name": "label"' in text
    assert "99999" not in text and "13.2" not in text  # no value of the data is read
    assert main(["study", "create", str(spec)]) == EXIT_REFUSED
    err = capsys.readouterr().err
    assert "the spec has 6 problem(s)" in err
    assert "features[0].lo: replace the placeholder" in err
    assert "pydantic" not in err
    assert main(["study", "template", str(data), "-o", str(spec)]) == EXIT_REFUSED
    assert "exists; pass --force" in capsys.readouterr().err


def test_template_from_parquet_schema(env, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = env / "d.parquet"
    pq.write_table(pa.table({"x": [1.0], "y": [2.0]}), path)
    assert main(["study", "template", str(path), "-o", "-"]) == EXIT_OK
    out = capsys.readouterr().out
    assert '"name": "x"' in out and '"name": "y"' in out
