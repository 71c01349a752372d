"""``fedod-coordinator study template`` and spec errors as an operator sees them."""

from __future__ import annotations

from coordinator.cli.main import EXIT_OK, EXIT_REFUSED, main


def test_template_reads_the_header_only_and_create_explains_placeholders(env, capsys):
    data = env / "wine.csv"
    data.write_text("patient_id,alcohol,ash,label\nP1,13.2,2.4,0\nP2,99999,2.1,1\n")
    spec = env / "study.json"
    assert main(["study", "template", str(data), "--study-id", "wine", "-o", str(spec)]) == EXIT_OK
    assert "fill in every PUBLIC_LOWER_BOUND" in capsys.readouterr().err
    text = spec.read_text()
    assert '"name": "alcohol"' in text and '"name": "ash"' in text
    # identifier and label columns are not features by default; a comment names them
    assert '"name": "patient_id"' not in text and '"name": "label"' not in text
    assert '"patient_id", "label"' in text
    assert "99999" not in text and "13.2" not in text  # no value of the data is read
    assert main(["study", "create", str(spec)]) == EXIT_REFUSED
    err = capsys.readouterr().err
    assert "the spec has 4 problem(s)" in err  # one line per feature, then the cohort
    assert 'feature "alcohol": lo and hi still the placeholder' in err
    assert "features[0]" not in err and "pydantic" not in err
    assert "aggregation.cohort_size: replace the placeholder" in err
    assert main(["study", "template", str(data), "-o", str(spec)]) == EXIT_REFUSED
    assert "exists; pass --force" in capsys.readouterr().err


def test_deleting_a_template_line_leaves_a_valid_spec(env, capsys):
    data = env / "d.csv"
    data.write_text("a,b,c\n")
    spec = env / "s.json"
    assert main(["study", "template", str(data), "--study-id", "del", "-o", str(spec),
                 "--ignore-column", "b"]) == EXIT_OK
    text = spec.read_text()
    assert '"name": "b"' not in text
    filled = text.replace('"PUBLIC_LOWER_BOUND"', "0").replace('"PUBLIC_UPPER_BOUND"', "1")
    lines = [ln for ln in filled.splitlines()
             if '"name": "c"' not in ln  # delete the last feature line, as the guide says
             and "NUMBER_OF_PARTICIPANTS" not in ln and "EXPECTED_RECORDS" not in ln]
    spec.write_text("\n".join(lines))
    capsys.readouterr()
    assert main(["study", "create", str(spec)]) == EXIT_OK, capsys.readouterr().err
    out = capsys.readouterr().out
    assert out.startswith("created study del: config v1") and "1 features: a [0, 1]" in out
    assert "{" not in out  # a summary, not JSON


def test_create_takes_the_cohort_and_warns_before_anyone_releases(env, capsys, coord_kit):
    import json

    spec = env / "s.json"
    spec.write_text(json.dumps({**coord_kit.study_spec("small"),
                                "lsh": {"n_tables": 100, "sample_size": 16}}))
    assert main(["study", "create", str(spec), "--cohort-size", "2",
                 "--expected-records", "10"]) == EXIT_OK
    captured = capsys.readouterr()
    assert "declared 2 participants of about 10 records" in captured.out
    assert "score signal-to-noise: 0." in captured.out
    warning = captured.err
    assert "dominated by noise" in warning and "ratio is 0." in warning
    for remedy in ("epsilon", "tables", "participants (hospitals)"):
        assert remedy in warning
    spec.write_text(json.dumps(coord_kit.study_spec("small-json")))
    assert main(["study", "create", str(spec), "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["study_id"] == "small-json"


def test_template_from_parquet_schema(env, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = env / "d.parquet"
    pq.write_table(pa.table({"x": [1.0], "y": [2.0]}), path)
    assert main(["study", "template", str(path), "-o", "-"]) == EXIT_OK
    out = capsys.readouterr().out
    assert '"name": "x"' in out and '"name": "y"' in out
