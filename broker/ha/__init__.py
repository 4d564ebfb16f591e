"""Classic RocketMQ master/slave replication (``enableDLegerCommitLog=false``).

Modules (nothing is imported here, so ``broker.ha.protocol`` stays free of asyncio and store):

- ``protocol``  sans-I/O wire protocol: ``encode_report``, ``encode_frame_header``,
  ``MasterConnection`` / ``SlaveConnection`` state machines and their events.
- ``service``   master side: ``HAService(commitlog, config, host=..., port=...)`` with
  ``start()``, ``shutdown()``, ``listen_port``, ``connection_count``, ``push2slave_max_offset``,
  ``is_slave_ok(put_where)``, ``await wait_for_slave_ack(next_offset, timeout_ms=None)``
  (-> ``broker.store.put_result.PutMessageStatus``), ``replica_hook`` (installed as
  ``commitlog.replica_hook`` by ``start()``), ``notify_put()``, ``status()``.
- ``client``    slave side: ``HAClient(commitlog, "host:port", config, on_append=...)`` with
  ``start()``, ``shutdown()``, ``update_master_address()``, ``connected``, ``status()``.
- ``settings``  ``HASettings.from_config(config)``: the HA keys with RocketMQ's defaults.
"""
