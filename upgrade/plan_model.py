"""The upgrade plan as data: :class:`Plan` (nodes, actions, refusals, warnings) and its JSON file.

Rules:
- A plan is plain data: ``mqupgrade plan`` writes it (:mod:`upgrade.plan`), ``mqupgrade apply``
  reads it back (:meth:`Plan.load`) and executes its :class:`Action` rows in order.
- ``target`` says which mode the plan leads to: ``dledger`` (the default; ``peers`` is dLegerPeers) or
  ``controller`` (``peers`` is controllerAddr; :mod:`upgrade.controller_plan`).
- The file carries the written confs, and so the group's ``dLegerAuthToken``: it is written
  owner-only (0600), atomically. A file of another ``version`` is refused, never guessed at.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

PLAN_VERSION = 1


class PlanError(Exception):
    """A user mistake in the plan arguments: one line, no traceback."""


@dataclass
class Node:
    self_id: str
    root: str
    state: str  # master | slave | new
    host: str
    dledger_port: int
    listen_port: int
    http_listen_port: int
    commit_log_dir: str
    conf_in: Optional[str]
    conf_out: str
    store_settings: dict[str, Any]


@dataclass
class Action:
    id: str
    kind: str
    node: str
    reason: str
    params: dict[str, Any] = field(default_factory=dict)
    optional: Optional[str] = None  # "freeze": only with ``apply --freeze``


@dataclass
class Plan:
    group: str
    peers: str
    file_size: int
    master: Optional[str]
    master_max_offset: int
    divided_commitlog_offset: int
    nodes: list[Node]
    actions: list[Action]
    refusals: list[str]
    warnings: list[str]
    inspection: dict[str, Any]
    version: int = PLAN_VERSION
    target: str = "dledger"  # dledger | controller (``mqupgrade plan --to``); plans without it are DLedger plans

    @property
    def ok(self) -> bool:
        return not self.refusals

    def node(self, self_id: str) -> Node:
        return next(n for n in self.nodes if n.self_id == self_id)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Plan":
        if d.get("version") != PLAN_VERSION:
            raise PlanError(f"plan version {d.get('version')!r} is not {PLAN_VERSION}")
        d = dict(d)
        d["nodes"] = [Node(**n) for n in d["nodes"]]
        d["actions"] = [Action(**a) for a in d["actions"]]
        return cls(**d)

    def save(self, path: str | os.PathLike[str]) -> None:
        from upgrade.fileops import atomic_write_text

        # the plan carries the written confs, and so the group's dLegerAuthToken: owner-only
        atomic_write_text(path, json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n", mode=0o600)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Plan":
        try:
            return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise PlanError(f"{path}: no such plan file") from None
        except (ValueError, TypeError, KeyError) as exc:
            raise PlanError(f"{path}: not a plan written by mqupgrade plan ({exc})") from None
