"""``fedod-participant stream STUDY``: the command body (online learning, docs/ONLINE.md); its
options are in :mod:`participant.cli.parser`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from common.errors import ConfigVersionConflict, NotFound
from participant.release import policy

if TYPE_CHECKING:  # the online engine is imported when the command runs
    from participant.agent import Agent
    from participant.online.engine import Streamer
    from participant.online.store import StreamStore


def _detectors(agent: Agent, client: Any, study: str, config: Any) -> dict[str, Any]:
    """LSH (and grid) detectors from the global model, or none before its first release."""
    from participant.scoring.model import fetch_model, model_detectors

    try:
        return model_detectors(config, fetch_model(agent.state, client, study, config))
    except (NotFound, ConfigVersionConflict) as exc:
        print(f"note: scoring with the online classifier only ({exc})", file=sys.stderr)
        return {}


def cmd_stream(agent: Agent, args: argparse.Namespace) -> None:
    from participant.online.engine import Streamer
    from participant.online.store import StreamStore

    enrolment = agent.state.load_enrolment()
    with agent.state.lock(), agent.ledger() as ledger, agent.client() as client:
        config, signed = agent.fetch_config(args.study, client)
        if config.online is None:
            raise ValueError(f"study {args.study} has no online section: it does not stream")
        policy.check_ceiling(config.online.epoch_cost(), enrolment.ceiling)
        policy.check_column_roles(config, args.id_column, tuple(args.ignore_column))
        store = StreamStore(agent.state.stream_path(args.study),
                            config.online.dim)
        clock = _Clock(config.online, args.clock, store.window()[0])

        def refetch() -> tuple[Any, str]:
            new, new_signed = agent.fetch_config(args.study, client)
            return new, new_signed.digest()

        try:
            streamer = Streamer(config, signed.digest(), store, ledger, client, enrolment.cap,
                                _detectors(agent, client, args.study, config), clock.now,
                                refetch)
            streamer.resume()
            _run(streamer, store, config, clock, args)
        finally:
            store.close()


class _Clock:
    """The schedule's clock: the calendar (``wall``) or the last tick read (``ticks``)."""

    def __init__(self, params: Any, mode: str, window: int) -> None:
        self.params, self.mode, self.tick = params, mode, max(window, 0)

    def now(self) -> int:
        return int(self.params.window_at(time.time())) if self.mode == "wall" else self.tick

    def seconds_left(self) -> float:
        return float(self.params.window_end(self.now()) - time.time())


def _run(streamer: Streamer, store: StreamStore, config: Any, clock: _Clock,
         args: argparse.Namespace) -> None:
    from participant.online.io import (
        LabelsFile,
        RecordParser,
        ScoreWriter,
        Tick,
        prompt_label,
        read_lines,
        until_deadlines,
        watch,
    )

    columns = [f.name for f in config.features]
    labels = LabelsFile(args.labels, store) if args.labels else None
    interactive = bool(args.watch) and sys.stdin.isatty() and sys.stdout.isatty()
    ignore = tuple(args.ignore_column)
    records = (watch(args.watch, columns, args.id_column, once=args.once, ignore=ignore)
               if args.watch else read_lines(sys.stdin, RecordParser(columns, args.id_column,
                                                                     ignore=ignore)))
    events = records if clock.mode == "ticks" else until_deadlines(records, clock.seconds_left)
    out = ScoreWriter(args.out, ["online", *streamer.detectors])
    out.catch_up(store)
    try:
        for item in events:
            if labels is not None:
                labels.poll(streamer)
            if item is None or isinstance(item, Tick):
                if isinstance(item, Tick) and clock.mode == "ticks":
                    clock.tick = max(clock.tick, item.window)
                streamer.advance()  # a window ended: pad it and release it
                continue
            record_id, x = item
            scored = streamer.consume(record_id, x)
            if scored is None:
                continue
            out.write(scored)
            if scored.queried and interactive and (label := prompt_label(record_id, scored)):
                streamer.label(record_id, label)
        if labels is not None:
            labels.poll(streamer)
            while args.wait_labels and store.n_awaiting():
                time.sleep(0.2)
                labels.poll(streamer)
    finally:
        out.close()
    doc = {"study": args.study, **store.counts(), "awaiting_labels": store.n_awaiting(),
           "window": store.window()[0], "weights_version": store.weights()[1]}
    refused = f", {doc['refused']} refused" if doc["refused"] else ""
    text = (f"stream {args.study}: {doc['records']} records consumed ({doc['beyond_slots']} "
            f"beyond their window's slots or before the centring window, scored only), "
            f"{doc['queried']} queried, {doc['labelled']} labelled, {doc['releases']} window "
            f"releases ({doc['acknowledged']} acknowledged{refused}), window {doc['window']} "
            f"open, online model v{doc['weights_version']}")
    print(json.dumps(doc) if args.json else text, file=sys.stderr)
