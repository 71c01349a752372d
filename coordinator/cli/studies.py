"""``fedod-coordinator study ACTION``: create a study from a spec, write a spec template from a
data file's column names, list studies."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from coordinator.cli.support import EXIT_OK, EXIT_REFUSED, key_store, open_session, print_json


def cmd_study_create(args: argparse.Namespace, settings: Any) -> int:
    from common.study.spec import load_study_spec
    from coordinator.services.studies import create_study, study_config, study_public

    body = _declare(load_study_spec(Path(args.spec).read_text()), args)
    keys = key_store(settings, existing=True)
    with open_session(settings) as session, _quiet_service_log():
        study = create_study(session, keys, body)
        if args.json:
            print_json(study_public(session, study))
        else:
            print(study_summary(study_config(study), keys.key_id()))
        _warn_noise(body, study_config(study))
    return EXIT_OK


@contextlib.contextmanager
def _quiet_service_log() -> Iterator[None]:
    """Mute the service's own noise warning (the CLI prints it once, as ``warning:``)."""
    import logging

    from coordinator.services.studies import log

    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _declare(body: Any, args: argparse.Namespace) -> Any:
    """The spec with ``--cohort-size`` / ``--expected-records`` put into its aggregation."""
    given = {k: v for k, v in (("cohort_size", args.cohort_size),
                               ("expected_records", args.expected_records)) if v is not None}
    if not given:
        return body
    from common.secagg.params import AggregationParams

    current = body.aggregation.model_dump(exclude={"h_min"}) if body.aggregation else {}
    return body.model_copy(update={"aggregation": AggregationParams.model_validate(
        {**current, **given})})


def study_summary(config: Any, key_id: str) -> str:
    """A readable account of a signed config: what participants will verify and spend."""
    from common.noise.planning import config_snr, expected_cells

    shown = [f"{f.name} [{f.lo:g}, {f.hi:g}]" for f in config.features[:6]]
    more = len(config.features) - len(shown)
    lines = [
        f"created study {config.study_id}: config v{config.version}, signed by {key_id}, "
        f"expires {config.expires_at:%Y-%m-%d}",
        f"  {len(config.features)} features: {', '.join(shown)}"
        + (f" and {more} more" if more > 0 else ""),
        f"  LSH iTables: {config.lsh.n_tables} tables of about "
        f"{expected_cells(config.lsh.sample_size):.0f} cells (sample size "
        f"{config.lsh.sample_size})",
        "  grid: " + (f"{config.grid.bins} bins per axis over "
                      f"{', '.join(config.grid.features or [])}, k = {config.grid.k}"
                      if config.grid else "none"),
        f"  each release costs {config.release_cost()} per participant",
    ]
    agg = config.aggregation
    if agg is None or agg.mode == "independent":
        who = "independent noise: each participant releases whenever it likes"
    else:
        who = (f"secure aggregation: rounds of {agg.cohort_size} (h_min {agg.h_min}), opened "
               + ("by the coordinator once the cohort is ready" if agg.open_rounds ==
                  "when_ready" else "by the administrator ('fedod-coordinator rounds open')"))
    if agg is not None and agg.cohort_size and agg.expected_records:
        who += (f"; declared {agg.cohort_size} participants of about {agg.expected_records} "
                "records")
    lines.append(f"  {who}")
    snr = config_snr(config)
    lines.append("  score signal-to-noise: " + (
        f"{snr[0]:.2f} over the cells records typically fill, {snr[1]:.2f} if they fill "
        "every cell (noise dominates below 1)" if snr is not None else
        "not checked: declare aggregation.cohort_size and expected_records (or "
        "--cohort-size/--expected-records) to have it checked before anyone releases"))
    if config.cohorts is not None:
        lines.append(f"  private cohorts: {config.cohorts.method}, epsilon "
                     f"{config.cohorts.epsilon} over the rounds (admin: 'cohorts start')")
    if config.online is not None:
        lines.append("  streaming: an online section (fedod-participant stream)")
    return "\n".join(lines)


def _column_names(path: Path) -> list[str]:
    """The column names of a CSV (its header line) or Parquet file (its schema); no values."""
    if path.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq

        return list(pq.read_schema(path).names)
    import csv

    with path.open(newline="") as fh:
        return next(csv.reader(fh), [])


def cmd_study_template(args: argparse.Namespace, settings: Any) -> int:
    from common.study.spec import study_template

    text = study_template(_column_names(Path(args.data)), args.study_id,
                          leave_out=[*args.id_column, *args.ignore_column])
    if args.output == "-":
        sys.stdout.write(text)
    else:
        out = Path(args.output)
        if out.exists() and not args.force:
            print(f"error: {out} exists; pass --force to overwrite it", file=sys.stderr)
            return EXIT_REFUSED
        out.write_text(text)
        print(
            f"wrote {out}: fill in every PUBLIC_LOWER_BOUND/PUBLIC_UPPER_BOUND from the study "
            "protocol and the expected participants and records, check the features (the "
            "identifier and label columns it left out are named in a comment), then run "
            f"'fedod-coordinator study create {out}'",
            file=sys.stderr,
        )
    return EXIT_OK


def _warn_noise(body: Any, config: Any) -> None:
    """Print, from public inputs only, when the study's model will be dominated by noise."""
    from common.noise.planning import config_noise_warning

    warning = config_noise_warning(config, getattr(body, "aggregation", None))
    if warning:
        print(f"warning: {warning}", file=sys.stderr)


def cmd_study_list(args: argparse.Namespace, settings: Any) -> int:
    from coordinator.services.studies import list_studies, study_public

    with open_session(settings) as session:
        for study in list_studies(session):
            public = study_public(session, study)
            print(
                f"{public.study_id}\tconfig v{public.version}\tmodel v{public.model_version}"
                f"\t{public.contributors} contributor{'' if public.contributors == 1 else 's'}"
            )
    return EXIT_OK



def add_parser(add: Any, sub: Any) -> None:
    """Add ``study create|template|list`` to the ``fedod-coordinator`` parser."""
    study = sub.add_parser("study", help="create and list studies").add_subparsers(
        dest="study_command", required=True, metavar="ACTION"
    )
    create = add(
        "create",
        cmd_study_create,
        "create a study from a StudyCreate JSON file "
        "(fresh hash seeds, signed config v1); prints a summary (--json: the study), and "
        "warns when the declared cohort's signal would be below the noise",
        study,
    )
    create.add_argument(
        "spec",
        help="path of a spec file (JSON, '//' comment lines allowed; see docs/USER_GUIDE.md)",
    )
    create.add_argument("--cohort-size", type=int, metavar="N",
                        help="participants expected to release (public; sets "
                        "aggregation.cohort_size): chooses the tables, checks the noise")
    create.add_argument("--expected-records", type=int, metavar="N",
                        help="public estimate of each participant's records (sets "
                        "aggregation.expected_records; never a count measured on the data)")
    create.add_argument("--json", action="store_true",
                        help="print the created study (with its signed config) as JSON")
    template = add(
        "template",
        cmd_study_template,
        "write a commented study spec from a CSV/Parquet file's column names; it reads no "
        "values: the public bounds are placeholders you fill in from the study protocol",
        study,
    )
    template.add_argument("data", help="a CSV (header line) or Parquet file (schema)")
    template.add_argument("--study-id", default="my-study", help="study id to put in the spec")
    template.add_argument(
        "-o", "--output", default="study.json",
        help="file to write (default study.json; - for stdout)",
    )
    template.add_argument("--force", action="store_true", help="overwrite an existing file")
    template.add_argument("--id-column", action="append", default=[], metavar="NAME",
                          help="a record-key column to leave out (names such as patient_id or "
                          "record_id are left out anyway; repeatable)")
    template.add_argument("--ignore-column", action="append", default=[], metavar="NAME",
                          help="another column to leave out, e.g. a label (repeatable)")
    add("list", cmd_study_list, "list studies with versions and contributor counts", study)
