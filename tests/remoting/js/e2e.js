'use strict';
// End-to-end driver for the ali-ons client (a real third-party RocketMQ client).
// Modes (one JSON object per stdout line, for the Python test to parse):
//   node e2e.js produce <nameSrv> <topic> <count> [accessKey secretKey]
//     -> {"ack":i,"key","tag","msgId","queueId","queueOffset","status"} per acknowledged send,
//        {"fail":i,"error"} per failed attempt (the same i is retried until acknowledged),
//        {"done":true,"acked":n}
//   node e2e.js consume <nameSrv> <topic> <group> [accessKey secretKey]
//     -> {"msg":{"msgId","key","tag","body","queueId","queueOffset","reconsumeTimes","topic"}} per delivery;
//        stops (consumer.close(), which commits offsets) on a "close" line on stdin -> {"closed":true}
const { Producer, Consumer, Message } = require('ali-ons');

const [mode, nameSrv, topic, arg4, ak, sk] = process.argv.slice(2);
const out = obj => process.stdout.write(JSON.stringify(obj) + '\n');
const quiet = { info() {}, warn() {}, debug() {}, error(...a) { process.stderr.write(a.map(String).join(' ') + '\n'); } };
const common = {
  httpclient: {}, // only used to look up nameSrv over HTTP, not with nameSrv set
  nameSrv,
  logger: quiet,
  pollNameServerInteval: 500,
  heartbeatBrokerInterval: 1000,
  rebalanceInterval: 1000,
  persistConsumerOffsetInterval: 1000,
};
if (ak) Object.assign(common, { accessKey: ak, secretKey: sk });
const sleep = ms => new Promise(r => setTimeout(r, ms));

async function produce(count) {
  const producer = new Producer(Object.assign({}, common, { producerGroup: 'PID_e2e', sendMsgTimeout: 2000,
    retryTimesWhenSendFailed: 2 }));
  producer.on('error', err => process.stderr.write('producer error: ' + err.message + '\n'));
  await producer.ready();
  let acked = 0;
  for (let i = 0; i < count; i++) {
    const tag = i % 3 === 0 ? 'TagA' : 'TagB';
    for (;;) {
      const msg = new Message(topic, tag, `body-${i}`);
      msg.keys = [ `key-${i}` ];
      try {
        const r = await producer.send(msg);
        if (r.sendStatus !== 'SEND_OK') throw new Error('status ' + r.sendStatus);
        out({ ack: i, key: `key-${i}`, tag, msgId: r.msgId, queueId: r.messageQueue.queueId,
          queueOffset: r.queueOffset, status: r.sendStatus });
        acked++;
        break;
      } catch (err) {
        out({ fail: i, error: String(err && err.message || err).slice(0, 300) });
        await sleep(200);
      }
    }
  }
  out({ done: true, acked });
  await producer.close();
  process.exit(0);
}

async function consume(group) {
  const consumer = new Consumer(Object.assign({}, common, { consumerGroup: group,
    consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET', pullTimeDelayMillsWhenException: 300,
    brokerSuspendMaxTimeMillis: 2000, consumerTimeoutMillisWhenSuspend: 5000 }));
  consumer.on('error', err => process.stderr.write('consumer error: ' + err.message + '\n'));
  consumer.subscribe(topic, '*', async msg => {
    out({ msg: { msgId: msg.msgId, key: msg.keys, tag: msg.tags, body: msg.body.toString(), topic: msg.topic,
      queueId: msg.queueId, queueOffset: msg.queueOffset, reconsumeTimes: msg.reconsumeTimes } });
  });
  await consumer.ready();
  out({ ready: true });
  process.stdin.setEncoding('utf8');
  let buf = '';
  process.stdin.on('data', async chunk => {
    buf += chunk;
    if (buf.includes('close')) {
      buf = '';
      await consumer.close();
      out({ closed: true });
      process.exit(0);
    }
  });
}

(async () => {
  if (mode === 'produce') await produce(Number(arg4));
  else if (mode === 'consume') await consume(arg4);
  else throw new Error('mode must be produce or consume');
})().catch(err => { process.stderr.write('fatal: ' + (err && err.stack || err) + '\n'); process.exit(2); });
