"""``dledger``: run a member of a group, or talk to a running group.

Rules
-----
* Sub-commands: ``server`` (runs until SIGTERM/SIGINT, then shuts down cleanly: flush,
  checkpoint, close), ``append``, ``get``, ``status``, ``transfer``, and the offline
  ``reset-term`` (recovery of an exhausted term, :mod:`dledger.term_reset`). Client commands take the
  same ``--peers``/``--group``/``--auth-token`` as the server and find the leader themselves.
* Output of client commands is JSON on stdout (one object per line for ``append --count``
  summaries and ``get``), so scripts and tests can parse it.
* User mistakes (bad flags, bad peer strings, unreachable peers, refused requests) print one
  ``dledger: error: ...`` line on stderr and exit with status 2 (usage) or 1 (runtime). No
  tracebacks for user mistakes.
* The server logs one line per role change (``role LEADER term 3 leader n0``) and nothing per
  message.
* A member that stops itself (a failed flush or store write the core cannot be told about)
  exits with status 1 and one ``dledger: error:`` line instead of lingering without serving.
* ``server`` refuses to start without ``--auth-token`` unless ``--allow-insecure`` is given and
  every peer is on loopback (one ``dledger: error:`` line naming both flags).
* The server runs on uvloop when it is installed (DESIGN §6); ``DLEDGER_NO_UVLOOP=1`` opts out.
  ``--coalesce-*`` tune how client appends are merged into proposals (``dledger.coalesce``).

Theory of operation
-------------------
argparse builds a :class:`DLedgerConfig` (server) or a :class:`DLedgerClient` (clients); each
sub-command is one coroutine run with :func:`asyncio.run`.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from typing import Any, Optional, Sequence

from .config import DLedgerConfig
from .errors import DLedgerError
from .rpc import framing as fr
from .rpc.handshake import HandshakeRejected
from .rpc.admission import PortLimits


class UserError(Exception):
    """A mistake the user can fix; printed as one line, exit status 1."""


def _size(text: str) -> int:
    units = {"k": 1024, "m": 1024**2, "g": 1024**3}
    t = text.strip().lower().rstrip("b").rstrip("i")
    try:
        if t and t[-1] in units:
            return int(float(t[:-1]) * units[t[-1]])
        return int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid size {text!r} (e.g. 1048576, 64k, 1g)") from None


def _peers(text: str) -> dict[str, tuple[str, int]]:
    try:
        return fr.parse_peers(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--group", default="default", help="DLedger group name (default: %(default)s)")
    p.add_argument("--peers", required=True, type=_peers, metavar="ID-HOST:PORT;...",
                   help="all members, e.g. 'n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913'")
    p.add_argument("--auth-token", default=None, help="shared secret (dLegerAuthToken)")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per request (default: %(default)s)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dledger", description="A DLedger-style Raft log: server and client.")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    s = sub.add_parser("server", help="run one member of a group")
    s.add_argument("--group", default="default")
    s.add_argument("--id", required=True, dest="self_id", help="this member's id (must appear in --peers)")
    s.add_argument("--peers", required=True, type=_peers, metavar="ID-HOST:PORT;...")
    s.add_argument("--store", required=True, help="store base dir (files go to STORE/dledger-ID/)")
    s.add_argument("--data-store-path", default=None, help="data dir override (dataStorePath)")
    s.add_argument("--data-file-size", type=_size, default=DLedgerConfig.mapped_file_size_for_entry_data)
    s.add_argument("--index-file-size", type=_size, default=DLedgerConfig.mapped_file_size_for_entry_index)
    s.add_argument("--tick-ms", type=int, default=DLedgerConfig.tick_ms)
    s.add_argument("--heartbeat-ms", type=int, default=DLedgerConfig.heartbeat_interval_ms)
    s.add_argument("--election-min-ms", type=int, default=DLedgerConfig.election_timeout_min_ms)
    s.add_argument("--election-max-ms", type=int, default=DLedgerConfig.election_timeout_max_ms)
    s.add_argument("--max-wait-ack-ms", type=int, default=DLedgerConfig.max_wait_ack_ms)
    s.add_argument("--max-pending", type=int, default=DLedgerConfig.max_pending_requests)
    s.add_argument("--max-batch-push-bytes", type=_size, default=DLedgerConfig.max_batch_push_bytes)
    s.add_argument("--no-batch-push", action="store_true", help="push one entry per request (DLedger default)")
    s.add_argument("--preferred-leader", default=None, help="preferred leader ids, ';'-separated")
    s.add_argument("--auth-token", default=None,
                   help="shared secret of the group (dLegerAuthToken, >= 16 chars, the same on every member)")
    s.add_argument("--allow-insecure", action="store_true",
                   help="run without --auth-token (dLegerAllowInsecure); only when every peer is on loopback")
    s.add_argument("--client-port", choices=["on", "off"], default="on",
                   help="serve client requests (append/get/status/transfer) on the port (default on; "
                        "'off' = peers only, as a broker-hosted member)")
    s.add_argument("--no-crc", action="store_true", help="write bodyCrc=0 (byte identity with Apache)")
    s.add_argument("--barrier", choices=["empty", "none"], default="empty",
                   help="entry a new leader appends so earlier terms commit: an empty-body entry "
                        "(default) or none")
    s.add_argument("--coalesce-window-ms", type=float, default=0.0,
                   help="wait this long to merge client appends into one proposal (default 0: merge "
                        "what arrived in the same loop iteration)")
    s.add_argument("--coalesce-max-entries", type=int, default=1024, help="entries per merged proposal")
    s.add_argument("--coalesce-max-bytes", type=_size, default=4 * 1024 * 1024, help="body bytes per merged proposal")
    s.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    lim = PortLimits()  # issue 23.1: admission on the port (dledger.rpc.admission)
    s.add_argument("--max-connections", type=int, default=lim.max_connections,
                   help="accepted connections in all (default %(default)s)")
    s.add_argument("--max-unauthenticated", type=int, default=lim.max_unauthenticated,
                   help="connections still in their handshake; a newcomer evicts the oldest (default %(default)s)")
    s.add_argument("--max-unauthenticated-per-host", type=int, default=lim.max_unauthenticated_per_host,
                   help="the same, per remote address (default %(default)s)")
    s.add_argument("--max-pending-bytes", type=_size, default=lim.max_pending_bytes,
                   help="bytes of unfinished frames over 64 KiB, all connections together (default 128m)")

    a = sub.add_parser("append", help="append entries through the leader")
    _common(a)
    a.add_argument("--data", required=True, help="body text (UTF-8)")
    a.add_argument("--count", type=int, default=1, help="append this many entries (default 1)")
    a.add_argument("--batch", type=int, default=1, help="bodies per request (default 1)")

    g = sub.add_parser("get", help="read a committed entry")
    _common(g)
    g.add_argument("--index", required=True, type=int)
    g.add_argument("--id", default=None, dest="peer", help="read from this member (default: the leader)")

    st = sub.add_parser("status", help="show each member's role, term and indexes")
    _common(st)
    st.add_argument("--id", default=None, dest="peer", help="only this member")

    t = sub.add_parser("transfer", help="hand leadership to another member")
    _common(t)
    t.add_argument("--to", required=True, help="id of the new leader")

    r = sub.add_parser("reset-term", help="offline: show a member's term, or reset an exhausted one "
                                          "(every member stopped, same --term on each; README Security)")
    r.add_argument("--store", required=True, help="the member's storeBaseDir (holds dledger-<id>/)")
    r.add_argument("--id", required=True, dest="self_id", help="this member's id")
    r.add_argument("--peers", required=True, type=_peers, metavar="ID-HOST:PORT;...",
                   help="all members: the command refuses while any of them accepts connections")
    r.add_argument("--term", type=int, default=None, help="new term, above every member's last log term")
    r.add_argument("--yes", action="store_true", help="confirm: the whole group is stopped")
    return ap


# ---------------------------------------------------------------------------- server


def config_from_args(args: argparse.Namespace) -> DLedgerConfig:
    peers = args.peers
    if args.self_id not in peers:
        raise UserError(f"--id {args.self_id!r} is not one of the --peers ids ({', '.join(peers)})")
    cfg = DLedgerConfig(
        group=args.group, self_id=args.self_id, peers=fr.format_peers(peers), store_base_dir=args.store,
        data_store_path=args.data_store_path, mapped_file_size_for_entry_data=args.data_file_size,
        mapped_file_size_for_entry_index=args.index_file_size, tick_ms=args.tick_ms,
        heartbeat_interval_ms=args.heartbeat_ms, election_timeout_min_ms=args.election_min_ms,
        election_timeout_max_ms=args.election_max_ms, max_wait_ack_ms=args.max_wait_ack_ms,
        max_pending_requests=args.max_pending, max_batch_push_bytes=args.max_batch_push_bytes,
        enable_batch_push=not args.no_batch_push, preferred_leader_ids=args.preferred_leader,
        auth_token=args.auth_token, entry_crc=not args.no_crc, allow_insecure=args.allow_insecure,
        serve_clients=args.client_port == "on", max_connections=args.max_connections,
        max_unauthenticated=args.max_unauthenticated, max_unauthenticated_per_host=args.max_unauthenticated_per_host,
        max_pending_bytes=args.max_pending_bytes,
    )
    try:
        return cfg.validate().check_auth()
    except ValueError as exc:
        raise UserError(str(exc)) from None


def use_uvloop() -> bool:
    """Make every event loop created from here on uvloop's, when installed (and not opted out)."""
    if os.environ.get("DLEDGER_NO_UVLOOP") == "1":
        return False
    try:
        import uvloop
    except ImportError:
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


async def run_server(cfg: DLedgerConfig, barrier: bool, coalesce: Optional[dict] = None) -> None:
    from .server import DLedgerServer  # lazy: client commands need no store

    from .store.errors import DLedgerStoreError

    try:
        server = DLedgerServer(cfg, leader_barrier_body=(lambda: b"") if barrier else None, **(coalesce or {}))
    except (ValueError, DLedgerStoreError) as exc:  # e.g. a currterm no DLedger could have written
        raise UserError(f"cannot open the store of {cfg.self_id}: {exc}") from None
    try:
        await server.start()
    except OSError as exc:
        await server.shutdown()
        raise UserError(f"cannot listen on {cfg.address_of(cfg.self_id)}: {exc.strerror or exc}") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    logging.getLogger("dledger").info("%s: serving group %s on %s", cfg.self_id, cfg.group, cfg.address_of(cfg.self_id))
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(server.stopped.wait())]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for w in waits:
        w.cancel()
    if server.fatal_error is not None:  # the member stopped itself: exit instead of lingering
        await server.shutdown()
        raise UserError(f"{cfg.self_id} stopped: {server.fatal_error}")
    logging.getLogger("dledger").info("%s: shutting down", cfg.self_id)
    await server.shutdown()


# ---------------------------------------------------------------------------- clients


def _client(args: argparse.Namespace):
    from .rpc.client import DLedgerClient

    return DLedgerClient(args.peers, args.group, secret=args.auth_token, timeout=args.timeout)


def _out(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


async def cmd_append(args: argparse.Namespace) -> None:
    if args.count < 1 or args.batch < 1:
        raise UserError("--count and --batch must be at least 1")
    client = _client(args)
    body = args.data.encode("utf-8")
    try:
        t0 = time.perf_counter()
        done = 0
        first = last = None
        while done < args.count:
            n = min(args.batch, args.count - done)
            res = await client.append_batch([body] * n)
            first = first or res[0]
            last = res[-1]
            done += n
            if args.count == 1:
                _out({"index": res[0].index, "pos": res[0].pos, "leader": client.leader_id})
        if args.count > 1:
            assert first is not None and last is not None  # count >= 1 appended at least one batch
            secs = time.perf_counter() - t0
            _out({"appended": done, "first_index": first.index, "last_index": last.index,
                  "last_pos": last.pos, "leader": client.leader_id, "seconds": round(secs, 3)})
    finally:
        await client.close()


async def cmd_get(args: argparse.Namespace) -> None:
    client = _client(args)
    try:
        if args.peer is not None and args.peer not in args.peers:
            raise UserError(f"--id {args.peer!r} is not one of the --peers ids")
        e = await client.get(args.index, peer_id=args.peer)
        body = e.get("body", b"")
        try:
            text: Any = body.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        _out({"index": e["index"], "term": e["term"], "pos": e["pos"], "size": len(body),
              "body": text, "body_hex": body.hex() if text is None else None})
    finally:
        await client.close()


async def cmd_status(args: argparse.Namespace) -> None:
    client = _client(args)
    ids = [args.peer] if args.peer else list(args.peers)
    if args.peer and args.peer not in args.peers:
        raise UserError(f"--id {args.peer!r} is not one of the --peers ids")
    reachable = 0
    try:
        for pid in ids:
            try:
                st = await client.status(pid)
                reachable += 1
                _out({k: st[k] for k in ("self_id", "role", "term", "leader_id", "leader_addr", "begin_index",
                                         "end_index", "committed_index", "peers")})
            except (OSError, ConnectionError, asyncio.TimeoutError) as exc:
                _out({"self_id": pid, "error": f"unreachable: {exc or type(exc).__name__}"})
            except HandshakeRejected as exc:
                _out({"self_id": pid, "error": f"refused: {exc.reason}"})
    finally:
        await client.close()
    if reachable == 0:
        raise UserError("no member reachable")


async def cmd_transfer(args: argparse.Namespace) -> None:
    if args.to not in args.peers:
        raise UserError(f"--to {args.to!r} is not one of the --peers ids ({', '.join(args.peers)})")
    client = _client(args)
    try:
        leader = await client.transfer(args.to)
        _out({"leader": leader})
    finally:
        await client.close()


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.cmd == "reset-term":
            from .term_reset import ResetRefused, run

            try:
                _out(run(args.store, args.self_id, args.peers, args.term, args.yes))
            except ResetRefused as exc:
                raise UserError(str(exc)) from None
        elif args.cmd == "server":
            logging.basicConfig(level=args.log_level, stream=sys.stderr,
                                format="%(asctime)s %(levelname)s %(name)s %(message)s")
            cfg = config_from_args(args)
            if args.coalesce_window_ms < 0 or args.coalesce_max_entries < 1 or args.coalesce_max_bytes < 1:
                raise UserError("--coalesce-window-ms must be >= 0 and --coalesce-max-* >= 1")
            use_uvloop()
            coalesce = {"coalesce_window_ms": args.coalesce_window_ms,
                        "coalesce_max_entries": args.coalesce_max_entries,
                        "coalesce_max_bytes": args.coalesce_max_bytes}
            asyncio.run(run_server(cfg, barrier=args.barrier == "empty", coalesce=coalesce))
        else:
            logging.basicConfig(level="WARNING", stream=sys.stderr, format="%(levelname)s %(message)s")
            coro = {"append": cmd_append, "get": cmd_get, "status": cmd_status, "transfer": cmd_transfer}[args.cmd]
            asyncio.run(coro(args))
        return 0
    except UserError as exc:
        print(f"dledger: error: {exc}", file=sys.stderr)
        return 1
    except DLedgerError as exc:
        print(f"dledger: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
