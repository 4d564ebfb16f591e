"""The Controller-mode conf of each node of a ``mqupgrade plan --to controller``.

Rules (Apache 5.3.3's ``docs/en/controller/deploy.md`` and ``conf/controller/quick-start``):
- ``enableControllerMode=true``, ``controllerAddr`` (the ``--controllers`` list, ``;``-separated),
  ``enableDLegerCommitLog=false`` written out even though it is the default (the broker refuses
  both true), ``brokerId=-1`` and ``brokerRole=SLAVE``: in Controller mode the broker applies for
  its id (``brokerIdentity``) and the controller elects the master, as Apache's quick-start
  confs say. ``brokerName`` and ``brokerClusterName`` are kept and always written (the controller
  keys a replica group by them), and so are the node's ports, paths and every other key of its own conf.
- A DLedger-mode conf loses its DLedger keys (``dLeger*``). Classic HA comes back (Controller
  mode replicates with AutoSwitch HA on ``haListenPort``); ``haMasterAddress`` goes (the
  controller names the master). The HA door is authenticated with the node's ``haAuthToken``,
  else the group's former ``dLegerAuthToken`` (the same secret the group already shares), else a
  fresh random secret for the group (a plan warning says so).
- An acknowledgement keeps its meaning: every node of a group that ran in DLedger mode (an ack
  meant a majority held the message) or had a ``SYNC_MASTER`` (its slave held it) gets
  ``allAckInSyncStateSet=true`` unless its own conf sets the key (Apache's default, false, acks
  once the master holds the message with ``inSyncReplicas`` 1: a kill -9 of the master could then
  lose acknowledged messages). An ``ASYNC_MASTER`` group keeps Apache's default.
- Every written conf is parsed back. Our broker's validator does not know Controller mode yet
  while ``enableControllerMode`` is not one of its keys (it refuses a SLAVE with brokerId -1):
  until then the conf is parsed without validation; once the key exists it is validated.
"""
from __future__ import annotations

import dataclasses
import secrets
from typing import Optional

from broker.config.broker_config import FIELD_BY_KEY, BrokerConfig, BrokerRole, MessageStoreConfig
from broker.config.conf_file import ParsedConf, parse_conf, to_properties
from broker.config.java_properties import escape_property
from upgrade.plan_model import Node

_CARRIED_SETTINGS = ("mapped_file_size_consume_queue", "max_hash_slot_num", "max_index_num", "message_index_enable")


def group_ha_token(confs: dict[str, ParsedConf]) -> tuple[Optional[str], Optional[str]]:
    """``(secret, note)``: the one the confs share (haAuthToken, else dLegerAuthToken), else a new one."""
    found = sorted({c.store.ha_auth_token or c.store.dleger_auth_token or "" for c in confs.values()} - {""})
    if len(found) == 1:
        return found[0], None
    if len(found) > 1:
        return None, None  # each node keeps its own (classic HA confs may differ per master)
    return secrets.token_urlsafe(32), ("generated a new haAuthToken for the group's AutoSwitch HA; it is in every "
                                       "written conf (and in the plan file, written owner-only): keep them private")


def durable_acks(confs: dict[str, ParsedConf], from_dledger: bool) -> bool:
    """Whether the group's acks meant more than "the master has it": a DLedger group (a majority),
    or a group with a ``SYNC_MASTER`` (its slave) -- then every node gets ``allAckInSyncStateSet``."""
    return from_dledger or any(c.store.enable_dleger_commit_log or c.store.broker_role == BrokerRole.SYNC_MASTER
                               for c in confs.values())


def render_controller_conf(node: Node, base: Optional[ParsedConf], broker_name: str, controllers: str,
                           file_size: int, ha_token: Optional[str], what: str, *, durable_acks: bool = False) -> str:
    """The Controller-mode conf of one node (see the module rules)."""
    broker = dataclasses.replace(base.broker) if base else BrokerConfig()
    store = dataclasses.replace(base.store) if base else MessageStoreConfig()
    fresh_s = MessageStoreConfig()
    store.store_path_root_dir = node.root
    store.store_path_commit_log = node.commit_log_dir
    store.mapped_file_size_commit_log = file_size
    for key in _CARRIED_SETTINGS:
        if node.store_settings.get(key) is not None:
            setattr(store, key, node.store_settings[key])
    store.enable_dleger_commit_log = False
    store.dleger_group, store.dleger_peers, store.dleger_self_id = fresh_s.dleger_group, fresh_s.dleger_peers, \
        fresh_s.dleger_self_id
    store.dleger_peers_http, store.dleger_auth_token = fresh_s.dleger_peers_http, fresh_s.dleger_auth_token
    store.dleger_allow_insecure = fresh_s.dleger_allow_insecure
    store.ha_master_address = None
    store.ha_auth_token = store.ha_auth_token or ha_token
    if node.listen_port:
        broker.listen_port = node.listen_port
    broker.broker_name = broker_name
    if durable_acks and (base is None or "allAckInSyncStateSet" not in base.lines):
        store.all_ack_in_sync_state_set = True  # keep what an ack meant (module rules)
    store.broker_role = BrokerRole.SLAVE
    broker.broker_id = -1
    props = to_properties(broker, store, only_changed=True)
    props.update({"brokerClusterName": broker.broker_cluster_name, "brokerName": broker_name, "brokerId": "-1", "brokerRole": "SLAVE", "enableDLegerCommitLog": "false",
                  "enableControllerMode": "true", "controllerAddr": controllers})
    header = (f"Written by mqupgrade plan --to controller: {what}, node {node.self_id} ({node.state}), store "
              f"{node.root}.\nDerived from {node.conf_in or 'the defaults'}; the controller assigns brokerId and "
              "elects the master (brokerId=-1, brokerRole=SLAVE as in Apache's controller confs).")
    lines = [f"# {h}" for h in header.splitlines()]
    lines += [f"{escape_property(k, True)}={escape_property(v, False)}" for k, v in props.items()]
    text = "\n".join(lines) + "\n"
    parse_conf(text, node.conf_out, validate="enableControllerMode" in FIELD_BY_KEY)  # ConfigError if invalid
    return text
