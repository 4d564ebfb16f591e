/*
 * Many Apache 4.9.8 mqadmin commands in ONE JVM (tests/remoting/mqadmin_jvm.py drives it).
 *
 * Protocol (one command at a time, in order): a request line on stdin is the output file's path,
 * then the command's arguments, separated by TAB; the runner calls MQAdminStartup.main0(args, null)
 * (what bin/mqadmin runs; main0 never calls System.exit in 4.9.8) with System.out and System.err
 * captured, writes the command's stdout followed by its stderr to that file, then answers "done"
 * on its own stdout. Between commands, System.out goes to the real stderr, so a stray print from a
 * background thread cannot corrupt the protocol.
 *
 * Every command starts as in a fresh JVM where the runner can make it so: the name server
 * property main0 sets for "-n" is cleared first (a command without -n must not see the last one's).
 */
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

public class MqadminRunner {
    public static void main(String[] unused) throws Exception {
        PrintStream proto = System.out;
        PrintStream realErr = System.err;
        System.setOut(realErr);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] parts = line.split("\t", -1);
            String[] args = new String[parts.length - 1];
            System.arraycopy(parts, 1, args, 0, args.length);
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            System.clearProperty("rocketmq.namesrv.addr");
            System.setOut(new PrintStream(out, true, "UTF-8"));
            System.setErr(new PrintStream(err, true, "UTF-8"));
            try {
                org.apache.rocketmq.tools.command.MQAdminStartup.main0(args, null);
            } catch (Throwable t) {
                t.printStackTrace();
            } finally {
                System.out.flush();
                System.err.flush();
                System.setOut(realErr);
                System.setErr(realErr);
            }
            try (FileOutputStream f = new FileOutputStream(parts[0])) {
                out.writeTo(f);
                err.writeTo(f);
            }
            proto.println("done");
            proto.flush();
        }
        System.exit(0);  // stdin closed: the test is done (a command's leftover threads must not hold the JVM)
    }
}
