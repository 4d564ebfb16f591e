"""Data-driven interaction tests of the core, after etcd-raft's ``rafttest.InteractionEnv``.

Rules
-----
- A script (``testdata/*.txt``) is a sequence of blocks::

      # comments and blank lines between blocks are kept as they are
      command arg arg key=value
      ----
      expected output (no blank line inside; "ok" when a command prints nothing)

  Each command runs against one :class:`tests.dledger.core.harness.Net`; its output is
  compared with the expected block.  ``REWRITE=1`` writes the actual outputs back instead
  (the rewritten expectations must then be reviewed against the paper, not just accepted).
- Inputs never process anything by themselves: ``campaign``, ``propose``, ``tick*`` and
  ``transfer-leadership`` only feed the core; ``process-ready``, ``deliver-msgs`` and
  ``stabilize`` show what the cores then say (Ready contents, messages received).
- Reading the script file is the only I/O.  Everything is deterministic (``seed=``).

Commands
--------
``add-nodes N [seed=S] [pre-vote=B] [check-quorum=B] [barrier=B] [<cfg>=<int>]``,
``campaign ID``, ``propose ID DATA``, ``tick ID [N]``, ``tick-heartbeat ID...``,
``tick-election ID...`` (``election_ticks_max`` ticks), ``process-ready ID...``,
``deliver-msgs ID...``, ``stabilize [ID...]``, ``partition ID... `` (those ids vs the rest),
``isolate ID``, ``crash ID...``, ``restart ID...`` (a new core from the durable state),
``reconnect ID...`` (restore that node's links), ``heal``, ``transfer-leadership FROM TO``, ``status ID``, ``raft-state``,
``raft-log ID``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from dledger.core import (AppendRequest, AppendResponse, Message, Ready, TimeoutNow,
                          VoteRequest, VoteResponse)
from tests.dledger.core.harness import Net


def fmt_msg(m: Message) -> str:
    head = f"{m.src}->{m.dst}"
    if isinstance(m, VoteRequest):
        kind = "PreVote" if m.pre_vote else "Vote"
        extra = " transfer" if m.transfer else ""
        return f"{head} {kind} term={m.term} last={m.last_index}@{m.last_term}{extra}"
    if isinstance(m, VoteResponse):
        kind = "PreVoteResp" if m.pre_vote else "VoteResp"
        verdict = "granted" if m.granted else f"rejected {m.result.name}"
        return f"{head} {kind} term={m.term} {verdict}"
    if isinstance(m, AppendRequest):
        ents = " ".join(f"{e.index}@{e.term}:{e.data.decode(errors='replace')}"
                        for e in m.entries)
        begin = " begin" if m.begin else ""
        return (f"{head} App term={m.term} prev={m.prev_index}@{m.prev_term} commit={m.commit}"
                f" entries=[{ents}]{begin}")
    if isinstance(m, AppendResponse):
        if m.success:
            return f"{head} AppResp term={m.term} ok match={m.match_index} last={m.last_index}"
        return (f"{head} AppResp term={m.term} reject prev={m.reject_index} "
                f"hint={m.hint_index}@{m.hint_term} last={m.last_index} {m.code.name}")
    if isinstance(m, TimeoutNow):
        return f"{head} TimeoutNow term={m.term}"
    raise TypeError(m)


def fmt_ready(nid: str, rd: Ready) -> list[str]:
    out = [f"> {nid} handling Ready"]
    if rd.role_change is not None:
        rc = rd.role_change
        out.append(f"  role: {rc.role.value} term={rc.term} leader={rc.leader_id or '-'}")
    if rd.hard_state is not None:
        out.append(f"  hard-state: term={rd.hard_state.term} vote={rd.hard_state.vote or '-'}")
    if rd.reset_begin is not None:
        out.append(f"  reset-begin: {rd.reset_begin}")
    if rd.truncate_from is not None:
        out.append(f"  truncate-from: {rd.truncate_from}")
    if rd.entries:
        out.append("  entries: " + " ".join(f"{e.index}@{e.term}" for e in rd.entries))
    if rd.append_barrier is not None:
        b = rd.append_barrier
        out.append(f"  append-barrier: {b.first_index}@{b.term}")
    if rd.committed_index is not None:
        out.append(f"  committed: {rd.committed_index}")
    for c in rd.completions:
        out.append(f"  completion: {c.first_index}..{c.last_index}@{c.term} {c.code.name}")
    if rd.transfer_result is not None:
        out.append(f"  transfer-result: {rd.transfer_result[0]} {rd.transfer_result[1].name}")
    out.extend(f"  send: {fmt_msg(m)}" for m in rd.messages)
    return out


def _bool(v: str) -> bool:
    if v not in ("true", "false"):
        raise ValueError(f"expected true/false, got {v!r}")
    return v == "true"


class InteractionEnv:
    def __init__(self) -> None:
        self.net: Optional[Net] = None
        self.out: list[str] = []

    # ------------------------------------------------------------------ dispatch
    def run(self, cmd: str, args: list[str]) -> str:
        self.out = []
        handler: Optional[Callable[[list[str]], None]] = getattr(
            self, "cmd_" + cmd.replace("-", "_"), None)
        if handler is None:
            raise ValueError(f"unknown command {cmd!r}")
        handler(args)
        return "\n".join(self.out) if self.out else "ok"

    def _net(self) -> Net:
        if self.net is None:
            raise ValueError("add-nodes first")
        return self.net

    def _ids(self, args: list[str]) -> list[str]:
        net = self._net()
        ids = args or net.ids
        for i in ids:
            if i not in net.nodes:
                raise ValueError(f"no node {i!r}")
        return ids

    # ------------------------------------------------------------------ commands
    def cmd_add_nodes(self, args: list[str]) -> None:
        n = int(args[0])
        kw: dict[str, object] = {}
        seed = 0
        for a in args[1:]:
            k, v = a.split("=", 1)
            if k == "seed":
                seed = int(v)
            elif k in ("pre-vote", "check-quorum", "barrier"):
                kw[{"pre-vote": "pre_vote", "check-quorum": "check_quorum",
                    "barrier": "leader_barrier"}[k]] = _bool(v)
            else:
                kw[k.replace("-", "_")] = int(v)
        self.net = Net(n, seed=seed, **kw)  # type: ignore[arg-type]  # Config fields
        self.net.on_ready = lambda nid, rd: self.out.extend(fmt_ready(nid, rd))
        self.net.on_deliver = self._show_delivery

    def _show_delivery(self, nid: str, seen: list[tuple[Message, str]]) -> None:
        self.out.append(f"> {nid} receiving messages")
        for m, why in seen:
            self.out.append(f"  {fmt_msg(m)}" + (f"  DROPPED ({why})" if why else ""))

    def cmd_campaign(self, args: list[str]) -> None:
        self._net().campaign(args[0])

    def cmd_propose(self, args: list[str]) -> None:
        d = self._net().propose(args[0], args[1].encode())
        where = f" {d.first_index}@{d.term}" if d.count else ""
        self.out.append(f"{d.code.name}{where} leader={d.leader_id or '-'}")

    def cmd_tick(self, args: list[str]) -> None:
        self._net().tick(args[0], int(args[1]) if len(args) > 1 else 1)

    def cmd_tick_heartbeat(self, args: list[str]) -> None:
        for i in self._ids(args):
            self._net().tick(i, self._net().core(i).cfg.heartbeat_ticks)

    def cmd_tick_election(self, args: list[str]) -> None:
        for i in self._ids(args):
            self._net().tick(i, self._net().core(i).cfg.election_ticks_max)

    def cmd_process_ready(self, args: list[str]) -> None:
        for i in self._ids(args):
            self._net().process(i)

    def cmd_deliver_msgs(self, args: list[str]) -> None:
        for i in self._ids(args):
            self._net().deliver(i)

    def cmd_stabilize(self, args: list[str]) -> None:
        self._net().stabilize(self._ids(args))

    def cmd_partition(self, args: list[str]) -> None:
        self._net().partition(self._ids(args))

    def cmd_isolate(self, args: list[str]) -> None:
        self._net().isolate(args[0])

    def cmd_heal(self, args: list[str]) -> None:
        self._net().heal()

    def cmd_crash(self, args: list[str]) -> None:
        for i in self._ids(args):
            self._net().crash(i)

    def cmd_restart(self, args: list[str]) -> None:
        for i in self._ids(args):
            self._net().restart(i)

    def cmd_reconnect(self, args: list[str]) -> None:
        for i in self._ids(args):
            self._net().reconnect(i)

    def cmd_transfer_leadership(self, args: list[str]) -> None:
        code = self._net().core(args[0]).transfer_leadership(args[1])
        self.out.append(code.name)

    def cmd_status(self, args: list[str]) -> None:
        s = self._net().core(args[0]).status()
        self.out.append(f"{s.self_id}: {s.role.value} term={s.term} leader={s.leader_id or '-'}"
                        f" vote={s.vote or '-'} last={s.end_index}@{s.end_term}"
                        f" commit={s.committed_index} persisted={s.persisted_index}")
        for p in s.peers:
            self.out.append(f"  {p.peer}: match={p.match_index} next={p.next_index} {p.state}"
                            f" inflight={p.inflight} active={p.recent_active}")

    def cmd_raft_state(self, args: list[str]) -> None:
        for i in self._ids(args):
            c = self._net().core(i)
            down = " (down)" if i in self._net().down else ""
            self.out.append(f"{i}: {c.role.value} term={c.term} leader={c.leader_id or '-'}"
                            f" commit={c.committed_index}{down}")

    def cmd_raft_log(self, args: list[str]) -> None:
        log = self._net().nodes[args[0]].log
        if not log.terms:
            self.out.append("(empty)")
        for i, (t, d) in enumerate(zip(log.terms, log.datas)):
            self.out.append(f"{i}@{t}: {d.decode(errors='replace')}")


# ---------------------------------------------------------------------- script files

@dataclass
class Block:
    pre: list[str]          # comment / blank lines before the command
    command: str
    expected: str


def parse(text: str) -> tuple[list[Block], list[str]]:
    """Blocks, and the trailing comment lines after the last one."""
    lines = text.splitlines()
    blocks: list[Block] = []
    pre: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            pre.append(line)
            i += 1
            continue
        if i + 1 >= len(lines) or lines[i + 1] != "----":
            raise ValueError(f"line {i + 1}: command {line!r} not followed by ----")
        j = i + 2
        body: list[str] = []
        while j < len(lines) and lines[j].strip():
            body.append(lines[j])
            j += 1
        blocks.append(Block(pre, line, "\n".join(body)))
        pre = []
        i = j
    return blocks, pre


def run_script(path: Path, rewrite: Optional[bool] = None) -> list[str]:
    """Run one script; return the mismatches (or rewrite the file when REWRITE=1)."""
    if rewrite is None:
        rewrite = os.environ.get("REWRITE") == "1"
    blocks, tail = parse(path.read_text())
    env = InteractionEnv()
    errors: list[str] = []
    actual: list[str] = []
    for b in blocks:
        words = b.command.split()
        try:
            got = env.run(words[0], words[1:])
        except Exception as e:  # a script error is a failure, reported where it happened
            got = f"error: {type(e).__name__}: {e}"
        actual.append(got)
        if got != b.expected:
            errors.append(f"{path.name}: {b.command}\n--- expected\n{b.expected}\n"
                          f"--- got\n{got}")
    if rewrite:
        parts: list[str] = []
        for b, got in zip(blocks, actual):
            parts.extend(b.pre)
            parts.extend([b.command, "----", got])
        parts.extend(tail)
        path.write_text("\n".join(parts) + "\n")
        return []
    return errors
