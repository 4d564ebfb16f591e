"""The DLedger conf of each node of an upgrade plan: ports, HTTP peers, the group's secret.

Rules:
- A node with its own ``--conf`` keeps its ports; others get ``base + 10k`` (the first k free
  on their host, counting listenPort, its HA port +1, httpListenPort and the DLedger port).
- Every written conf is parsed back before it is returned: the plan never carries a conf the
  broker would refuse.
- Doors: one ``dLegerAuthToken`` for the group (given, agreed by every ``--conf``, or a fresh
  random secret, with a warning); classic HA keys go; a base conf without ACL keeps its
  listenPort open *explicitly* (``remotingAllowInsecure=true``).
"""
from __future__ import annotations

import dataclasses
import secrets
from pathlib import Path
from typing import Optional

from broker.config.conf_file import ConfigError, ParsedConf, load_conf, parse_conf, to_conf
from broker.config.broker_config import BrokerConfig, MessageStoreConfig
from broker.security_policy import MIN_SECRET_LENGTH
from upgrade.plan_model import Node, PlanError


def ports_of(node: Node) -> list[int]:
    ports = [node.listen_port, node.listen_port + 1, node.dledger_port]
    if node.http_listen_port and node.http_listen_port != node.listen_port:
        ports.append(node.http_listen_port)
    return ports


def assign_ports(nodes: list[Node], base: int, http_base: int) -> None:
    """Nodes without their own conf get ``base + 10k`` (first k free on their host)."""
    for n in nodes:
        if n.listen_port:
            continue
        taken = {p for m in nodes if m is not n and m.host == n.host and m.listen_port for p in ports_of(m)}
        taken |= {m.dledger_port for m in nodes if m.host == n.host}
        k = 0
        while True:
            listen = base + 10 * k
            http = http_base + 10 * k if http_base else 0
            cand = {listen, listen + 1} | ({http} if http else set())
            if not cand & taken:
                n.listen_port, n.http_listen_port = listen, http
                break
            k += 1


def http_peers_of(nodes: list[Node]) -> str:
    """``dLegerPeersHttp`` of the group: each node's HTTP API (httpListenPort, else listenPort) on its
    dLegerPeers host, so followers answer NOT_MASTER with the leader's address and sync metadata."""
    return ";".join(f"{n.self_id}-{n.host}:{n.http_listen_port or n.listen_port}" for n in nodes)


def group_auth_token(confs: dict[str, ParsedConf], given: Optional[str]) -> tuple[str, Optional[str]]:
    """``(dLegerAuthToken, note)`` for the group: ``--auth-token``, else the one every ``--conf``
    that has one agrees on, else a fresh random secret (``secrets.token_urlsafe(32)``); ``note``
    says which, for the plan's warnings."""
    if given is not None:
        if len(given) < MIN_SECRET_LENGTH:
            raise PlanError(f"--auth-token is {len(given)} characters; use at least {MIN_SECRET_LENGTH}")
        return given, None
    found = sorted({c.store.dleger_auth_token for c in confs.values() if c.store.dleger_auth_token})
    if len(found) > 1:
        raise PlanError("the --conf files carry different dLegerAuthToken values; pass --auth-token to choose one")
    if found:
        return found[0], None
    return secrets.token_urlsafe(32), ("generated a new dLegerAuthToken for the group; it is in every written conf "
                                       "(and in the plan file, written owner-only): keep them private")


_CARRIED_SETTINGS = ("mapped_file_size_consume_queue", "max_hash_slot_num", "max_index_num", "message_index_enable")


def render_conf(node: Node, base: Optional[ParsedConf], own: bool, group: str, peers: str, file_size: int,
                broker_name: str, http_peers: Optional[str] = None, auth_token: Optional[str] = None) -> str:
    """The DLedger conf of one node (validated by parsing it back).

    Doors: the group's ``dLegerAuthToken`` is written into every conf; classic HA keys go (no HA
    in DLedger mode); a base conf without ACL keeps its listenPort open *explicitly*
    (``remotingAllowInsecure=true``, with a plan warning) so the upgrade does not change who may
    connect, but nobody can miss it."""
    broker = dataclasses.replace(base.broker) if base else BrokerConfig()
    store = dataclasses.replace(base.store) if base else MessageStoreConfig()
    fresh_b, fresh_s = BrokerConfig(), MessageStoreConfig()
    store.store_path_root_dir = node.root
    store.store_path_commit_log = node.commit_log_dir
    if not own:
        store.store_path_dledger_commit_log = None
        store.read_only_commit_log_store_paths = None
        broker.broker_ip1 = node.host if node.host not in ("localhost",) else fresh_b.broker_ip1
    store.mapped_file_size_commit_log = file_size
    # every store setting inspect found (conf, or inferred from the files: the IndexFile's
    # slots/num, the ConsumeQueue file size) goes into the conf, or the upgraded store refuses
    # to start on its own files (issue 14.4)
    for key in _CARRIED_SETTINGS:
        if node.store_settings.get(key) is not None:
            setattr(store, key, node.store_settings[key])
    store.enable_dleger_commit_log = True
    store.dleger_group, store.dleger_peers, store.dleger_self_id = group, peers, node.self_id
    store.dleger_peers_http = http_peers
    store.broker_role = fresh_s.broker_role  # set at run time from the DLedger role
    store.ha_master_address = None
    broker.broker_id = fresh_b.broker_id
    broker.broker_name = broker_name
    broker.listen_port, broker.http_listen_port = node.listen_port, node.http_listen_port
    store.ha_listen_port = node.listen_port + 1
    store.ha_auth_token, store.ha_allow_insecure, store.ha_bind_address = None, False, None
    store.dleger_auth_token = auth_token
    store.dleger_allow_insecure = False
    if not broker.acl_enable:
        broker.remoting_allow_insecure = True
    header = (f"Written by mqupgrade plan: DLedger group {group}, node {node.self_id} ({node.state}), store {node.root}.\n"
              f"Derived from {node.conf_in if node.conf_in else 'the defaults'}; brokerRole/brokerId are set at run time.")
    text = to_conf(broker, store, only_changed=True, header=header)
    parse_conf(text, node.conf_out)  # raises ConfigError if we wrote something invalid
    return text


def load_confs(paths: list[str]) -> dict[str, ParsedConf]:
    """Parse ``--conf`` files, keyed by their resolved ``storePathRootDir``."""
    out: dict[str, ParsedConf] = {}
    for p in paths:
        try:
            conf = load_conf(p)
        except FileNotFoundError:
            raise PlanError(f"--conf {p}: no such file") from None
        except ConfigError as exc:
            raise PlanError(f"--conf {p}: {exc}") from None
        root = str(Path(conf.store.store_path_root_dir).expanduser().resolve())
        if root in out:
            raise PlanError(f"--conf {p}: another conf already describes {root}")
        out[root] = conf
    return out
