"""RocketMQ's remoting protocol (the TCP protocol of real RocketMQ clients) for this broker.

- :mod:`.codes`: RequestCode / ResponseCode values of RocketMQ 4.9.x.
- :mod:`.codec`: sans-I/O RemotingCommand codec (JSON and ROCKETMQ header types) and the
  incremental frame decoder.
- :mod:`.server` / :mod:`.client`: thin asyncio drivers (dispatch by request code; pipelined
  client with opaque matching).
- :mod:`.acl`: plain ACL (``plain_acl.yml``, AccessKey + HmacSHA1 signature).
- :mod:`.processors`: the broker's request processors, calling into ``broker.processor``.
- :mod:`.broker_remoting`: glue started by the BrokerController (server on ``listenPort``,
  name-server registration).
"""
