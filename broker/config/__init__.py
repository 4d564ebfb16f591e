"""The broker's configuration: RocketMQ's ``BrokerConfig`` and ``MessageStoreConfig`` and their files.

- :mod:`.broker_config`: the model (``BrokerConfig``, ``MessageStoreConfig``, roles, flush types,
  ``dLegerPeers`` parsing), one field per Apache key.
- :mod:`.conf_file`: reading a broker ``.conf`` into the model (unknown keys, typos, values).
- :mod:`.config_keys`: every key Apache RocketMQ itself understands (data).
- :mod:`.java_properties`: ``java.util.Properties`` text, as Apache reads and writes it.
"""
