// A Java 4.9.8 push consumer that stays online so that mqadmin can ask the broker about it.
//
// Rules: subscribes GROUP to TOPIC (all tags), prints one JSON line {"clientId": ...} once it has
// started, prints {"consumed": KEY} for every message it is given (consumeMessageDirectly
// included), and exits when its stdin closes or after 120 s, whichever is first.
//
// usage: ConsumerHold NAMESRV TOPIC GROUP
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

public class ConsumerHold {
    public static void main(String[] args) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(args[2]);
        c.setNamesrvAddr(args[0]);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(args[1], "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) System.out.println("{\"consumed\":\"" + m.getKeys() + "\"}");
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        System.out.println("{\"clientId\":\"" + c.getDefaultMQPushConsumerImpl().getmQClientFactory().getClientId() + "\"}");
        System.out.flush();
        Thread stdin = new Thread(() -> {  // ends when the test closes our stdin
            try { while (System.in.read() >= 0) { } } catch (Exception e) { }
        });
        stdin.setDaemon(true);
        stdin.start();
        stdin.join(120000);
        c.shutdown();
        System.exit(0);
    }
}
