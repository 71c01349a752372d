"""``study create`` chooses the LSH tables for the noise and warns when noise dominates.

The cohort is declared in ``StudyCreate.aggregation`` and signed in ``StudyConfig.aggregation``
(``common.secagg.params.AggregationParams``); the real CLI, service and database run.
"""

from __future__ import annotations

import json

from common.detectors.rules import lsh_rule
from coordinator.cli.main import EXIT_OK, main


def _create(env, capsys, coord_kit, study_id, aggregation, lsh=None):
    spec = coord_kit.study_spec(study_id, epsilon_lsh="0.1")
    spec["aggregation"] = aggregation
    if lsh is None:
        del spec["lsh"]
    else:
        spec["lsh"] = lsh
    path = env / f"{study_id}.json"
    path.write_text(json.dumps(spec))
    assert main(["study", "create", str(path), "--json"]) == EXIT_OK
    out = capsys.readouterr()
    return coord_kit.config_of(json.loads(out.out)["config"]), out.err


def test_tables_chosen_for_the_noise_when_not_fixed(env, capsys, coord_kit):
    cohort = {"mode": "secure", "cohort_size": 10, "expected_records": 200}
    config, err = _create(env, capsys, coord_kit, "s1", cohort)
    assert config.aggregation.h_min == 9  # n - D - T with the default T = 1
    plan = lsh_rule(d=len(config.features), expected_records=200, cohort_size=10,
                    epsilon="0.1", mode="secure", h_min=config.aggregation.h_min)
    assert (config.lsh.n_tables, config.lsh.sample_size) == (plan.n_tables, plan.sample_size)
    assert (plan.n_tables, plan.sample_size) != (100, 16)


def test_fixed_tables_are_kept_and_noise_warned(env, capsys, coord_kit):
    cohort = {"mode": "independent", "cohort_size": 10, "expected_records": 200}
    config, err = _create(env, capsys, coord_kit, "s2", cohort,
                          lsh={"n_tables": 100, "sample_size": 16})
    assert (config.lsh.n_tables, config.lsh.sample_size) == (100, 16)
    assert "warning: noise may cost accuracy" in err  # the even-fill SNR is below 1
    assert "secure aggregation" in err


def test_nothing_declared_keeps_defaults_silently(env, capsys, coord_kit):
    config, err = _create(env, capsys, coord_kit, "s3", {})
    assert (config.lsh.n_tables, config.lsh.sample_size) == (100, 16)
    assert "warning" not in err
