"""Controller mode (RIP-44): Apache RocketMQ 5.x's ``controller`` module, in Python.

The controller keeps, per broker set, the registered broker ids, the master, the SyncStateSet
and their epochs, replicated by Raft; brokers ask it to register, to elect a master and to
change the SyncStateSet. This package is the pure part (no I/O, no clock):

- ``codes``        request and response codes, numbers as Apache 5.3.3.
- ``headers``      typed request/response headers <-> remoting ``extFields``.
- ``bodies``       JSON bodies (``SyncStateSet``, ``ElectMasterResponseBody``, ``BrokerReplicasInfo``).
- ``fastjson``     the fastjson 1.2.83 bytes those bodies and the events are written in.
- ``events``       the replicated events and their ``EventSerializer`` bytes.
- ``elect_policy`` ``DefaultElectPolicy`` over a ``LiveBrokers`` snapshot.
- ``replicas_info`` ``ReplicasInfoManager``: request handlers -> (response, events), and
  ``apply_event``.

The server (I/O, one asyncio loop per process, ``mqcontroller -c controller.conf``):

- ``heartbeat``    the brokers' heartbeat table (``DefaultBrokerHeartbeatManager``), clock passed in.
- ``config``       ``ControllerConfig`` keys and defaults, door checks.
- ``server``       ``ControllerServer``: the state machine replicated on our ``dledger`` library.
- ``notify``       ``NOTIFY_BROKER_ROLE_CHANGED`` pushes.
- ``processor``    the remoting door (``ControllerRequestProcessor``) and its ACL hook.
- ``status_http``  ``/status`` and ``/metrics``.
- ``cli``          ``mqcontroller`` / ``python -m controller``.

Nothing is imported here. docs/controller-mode.md has the plan for the rest (the broker's
ReplicasManager and AutoSwitch HA).
"""
