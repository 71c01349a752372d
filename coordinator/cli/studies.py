"""``fedod-coordinator study ACTION``: create a study from a spec, write a spec template from a
data file's column names, list studies."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from coordinator.cli.support import EXIT_OK, EXIT_REFUSED, key_store, open_session, print_json


def cmd_study_create(args: argparse.Namespace, settings: Any) -> int:
    from common.spec import load_study_spec
    from coordinator.services.studies import create_study, study_config, study_public

    body = load_study_spec(Path(args.spec).read_text())
    keys = key_store(settings, existing=True)
    with open_session(settings) as session:
        study = create_study(session, keys, body)
        print_json(study_public(session, study))
        _warn_noise(body, study_config(study))
    return EXIT_OK


def _column_names(path: Path) -> list[str]:
    """The column names of a CSV (its header line) or Parquet file (its schema); no values."""
    if path.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq

        return list(pq.read_schema(path).names)
    import csv

    with path.open(newline="") as fh:
        return next(csv.reader(fh), [])


def cmd_study_template(args: argparse.Namespace, settings: Any) -> int:
    from common.spec import study_template

    text = study_template(_column_names(Path(args.data)), args.study_id)
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
            "protocol, delete identifier and label columns, then run "
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
        "(fresh hash seeds, signed config v1); prints the study",
        study,
    )
    create.add_argument(
        "spec",
        help="path of a spec file (JSON, '//' comment lines allowed; see docs/USER_GUIDE.md)",
    )
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
    add("list", cmd_study_list, "list studies with versions and contributor counts", study)
