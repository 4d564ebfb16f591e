"""mqbroker: start one broker from a RocketMQ-style ``.conf`` file.

Usage::

    mqbroker -c conf/classic/broker-a.conf          # run until SIGTERM/SIGINT
    mqbroker -c conf/classic/broker-a.conf -p       # print the effective config and exit
    mqbroker -c conf/classic/broker-a.conf -m       # print only the important keys and exit

Rules:
- Exit codes: 0 after a clean shutdown, 2 for a bad command line or conf file (unknown key with
  a "did you mean", bad value, unreadable file), 3 when the broker cannot start (store lock held
  by another process, port in use, store does not load), 4 when the DLedger member stopped itself
  while the broker ran (disk full, failed flush, ...: the broker shuts down rather than serve as a
  zombie; the line names the cause and the fix, and a supervisor restarts it once the cause is
  fixed), 5 when the shutdown was not clean: a step did not finish within ``shutdownTimeoutMillis``
  (ours, default 10 s; the step, with stacks, is in the log) or failed (a full disk: metadata not
  written, dispatch not finished, so ``abort`` stays); the next start recovers the store,
  128 + N for a second signal N during shutdown (exit at once). The error is one line on
  stderr, prefixed ``mqbroker:``, never a traceback.
- SIGTERM/SIGINT start an orderly shutdown that always ends (``broker.shutdown``);
  ``kill -USR1 <pid>`` writes every thread's and asyncio task's stack to the log.
- Logs go to stderr, one line per state change, ``time level logger message``; ``--log-level``
  (or ``$RMQ_LOG_LEVEL``) picks the level.
- The event loops (the broker's, and the DLedger loop thread of a DLedger-mode store) are uvloop
  when it is installed (DESIGN §6), unless ``$RMQ_NO_UVLOOP=1``.

Theory of operation: parse args -> ``broker.config.conf_file.load_conf`` -> ``BrokerController``
-> ``asyncio.run(controller.run_until_signal())``.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
from typing import Any

IMPORTANT_KEYS = ("brokerClusterName", "brokerName", "brokerId", "brokerRole", "flushDiskType", "listenPort",
                  "haListenPort", "haMasterAddress", "storePathRootDir", "enableDLegerCommitLog")


def _err(msg: str) -> None:
    print(f"mqbroker: {msg}", file=sys.stderr)


def _config_items(*objs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for obj in objs:
        if dataclasses.is_dataclass(obj):
            out.update({f.metadata.get("key") or _camel(f.name): getattr(obj, f.name) for f in dataclasses.fields(obj)})
        else:
            out.update({_camel(k): v for k, v in vars(obj).items() if not k.startswith("_")})
    return out


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _use_uvloop() -> None:
    """Every event loop created from here on (``asyncio.run``, ``new_event_loop``) is uvloop's."""
    if os.environ.get("RMQ_NO_UVLOOP") == "1":
        return
    try:
        import uvloop  # noqa: WPS433
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="mqbroker", description="Start a rocketmq-py broker from a .conf file.")
    p.add_argument("-c", "--config-file", required=True, help="broker .conf file (Java properties, RocketMQ keys)")
    p.add_argument("-p", "--print-config", action="store_true", help="print all config items and exit")
    p.add_argument("-m", "--print-important", action="store_true", help="print important config items and exit")
    p.add_argument("--log-level", default=os.environ.get("RMQ_LOG_LEVEL", "INFO"))
    args = p.parse_args(argv)

    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr)

    from broker.config.conf_file import ConfigError, load_conf  # noqa: WPS433

    try:
        conf = load_conf(args.config_file)
        broker_config, store_config = conf.broker, conf.store
    except ConfigError as exc:
        _err(str(exc))
        return 2
    except OSError as exc:
        _err(f"cannot read config file {args.config_file}: {exc.strerror or exc}")
        return 2

    if not (args.print_config or args.print_important):
        from broker.security_policy import check_doors  # noqa: WPS433

        try:
            check_doors(conf)  # before anything binds: every door authenticates or is explicitly open
        except ConfigError as exc:
            _err(str(exc))
            return 2

    if args.print_config or args.print_important:
        items = _config_items(broker_config, store_config)
        for key in sorted(items):
            if args.print_important and key not in IMPORTANT_KEYS:
                continue
            value = items[key]
            print(f"{key}={getattr(value, 'name', value) if value is not None else ''}")
        return 0

    from broker.controller import (BrokerController, BrokerMemberStoppedError,  # noqa: WPS433
                                   BrokerShutdownIncompleteError, BrokerStartError)
    from broker.shutdown import EXIT_SHUTDOWN_INCOMPLETE  # noqa: WPS433

    _use_uvloop()
    from broker.gc_watch import WATCH  # noqa: WPS433

    WATCH.install()
    controller = BrokerController(broker_config, store_config, conf_path=args.config_file)
    try:
        asyncio.run(controller.run_until_signal())
    except BrokerStartError as exc:
        _err(f"cannot start broker: {exc}")
        return 3
    except BrokerMemberStoppedError as exc:
        _err(f"broker stopped: {exc}")
        return 4
    except BrokerShutdownIncompleteError as exc:
        _err(str(exc))
        sys.stderr.flush()
        os._exit(EXIT_SHUTDOWN_INCOMPLETE)  # an abandoned service's thread must not hold up the exit
    except KeyboardInterrupt:  # a second Ctrl-C during shutdown
        return 130
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        logging.getLogger("broker").debug("start failure", exc_info=True)
        _err(f"cannot start broker: {type(exc).__name__}: {exc}")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
