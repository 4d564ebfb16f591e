"""mqnamesrv: RocketMQ's name server (route registry) over the remoting protocol.

- :mod:`.route_info`: RouteInfoManager (pure tables + an injected clock).
- :mod:`.server`: NamesrvController: request processors, broker expiry scan, CLI ``main``.
Run: ``python -m broker.namesrv -p 9876``.
"""
