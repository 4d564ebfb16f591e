"""Controller mode (RIP-44) on the broker side: Apache RocketMQ 5.x's store/ha/autoswitch files.

Modules (nothing is imported here):

- ``checkpoint_file`` Apache's ``CheckpointFile`` text format (count, CRC, one entry a line) with
  its ``.bak`` fallback; pure encode/decode plus one small I/O class.
- ``epoch_file``      ``EpochFileCache``: the ``<masterEpoch, startOffset>`` history in
  ``epochFileCheckpoint``, and ``find_consistent_point`` (the slave's truncation point).
- ``metadata_file``   ``BrokerMetadata`` / ``TempBrokerMetadata``: the ``brokerIdentity`` and
  ``brokerIdentity-temp`` files that keep the controller-assigned brokerId.
- ``frames``          the AutoSwitch HA wire frames (``AutoSwitchHAClient`` /
  ``AutoSwitchHAConnection``), encoders and bounded incremental decoders.
- ``protocol``        the slave and master connection state machines (tables as data) and the
  slave's truncation decision, sans-I/O; ``actions`` the steps they return.
- ``sync_state``      the master's SyncStateSet, confirm offset and put-acknowledgement rules,
  and ``changeToMaster`` as a plan; pure.
- ``service``         asyncio master (``AutoSwitchHAService``): accepts slaves, transfers from a
  classic CommitLog's ``get_data``, keeps the SyncStateSet; optional haAuthToken handshake.
- ``client``          asyncio slave (``AutoSwitchHAClient``): connects, truncates, appends.
- ``replicas_manager`` Apache's ``ReplicasManager`` as a sans-I/O state machine: the crash-safe
  broker-id registration, heartbeats, elections, role changes and SyncStateSet alterations,
  with the controller's requests as actions; ``replicas_messages`` its events and actions.
"""
