"""mqnamesrv: RocketMQ's name server (route registry) over the remoting protocol.

- :mod:`.route_info`: RouteInfoManager (pure tables + an injected clock).
- :mod:`.server`: NamesrvController: request processors, broker expiry scan, CLI ``main``.
- :mod:`.doors`: who may call what (ACL for writes, loopback unless told, explicit open).
- :mod:`.kv_config`: the bounded KV config store.
Run: ``python -m namesrv -p 9876`` (loopback, open), or ``-c conf/namesrv/namesrv.properties``.
"""
