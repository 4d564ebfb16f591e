"""The broker's remoting request processors (RocketMQ's SendMessageProcessor,
PullMessageProcessor, ClientManageProcessor, ConsumerManageProcessor, AdminBrokerProcessor,
QueryMessageProcessor). Business logic stays in ``broker.processor``/``broker.store_access``;
these modules translate headers, bodies and error codes."""
