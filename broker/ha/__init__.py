"""Classic RocketMQ master/slave replication (``enableDLegerCommitLog=false``).

Modules (nothing is imported here, so ``broker.ha.protocol`` stays free of asyncio and store):

- ``handshake`` sans-I/O ``haAuthToken`` mutual challenge-response (``SlaveHandshake``,
  ``MasterHandshake``) and the per-direction ``ChannelMac`` that tags every frame and report
  after it. No token: no handshake, no tags — RocketMQ's classic HA bytes, so Apache RocketMQ
  masters and slaves interoperate (``mqbroker`` allows that only with ``haAllowInsecure=true``).
- ``protocol``  sans-I/O wire protocol: ``encode_report``, ``encode_frame_header``,
  ``MasterConnection`` / ``SlaveConnection`` state machines and their events.
- ``connection`` master side, one socket: admission (handshake or first report, deadline,
  refusals) and ``HAConnection``'s read/write/watchdog loops.
- ``service``   master side: ``HAService(commitlog, config, host=..., port=..., broker_name=...,
  auth_token=...)`` (limits: ``ha_max_connections``, ``ha_max_pending_connections``) with
  ``start()``, ``shutdown()``, ``listen_port``, ``connection_count``, ``push2slave_max_offset``,
  ``is_slave_ok(put_where)``, ``await wait_for_slave_ack(next_offset, timeout_ms=None)``
  (-> ``broker.store.put_result.PutMessageStatus``), ``replica_hook`` (installed as
  ``commitlog.replica_hook`` by ``start()``), ``notify_put()``, ``status()`` (``auth``,
  ``authenticated_slave_count``, ``pending_connections``, ``refused_connections``).
- ``client``    slave side: ``HAClient(commitlog, "host:port", config, on_append=..., broker_name=...,
  auth_token=...)`` with
  ``start()``, ``shutdown()``, ``update_master_address()``, ``connected``, ``status()``.
- ``settings``  ``HASettings.from_config(config)``: the HA keys with RocketMQ's defaults.
"""
