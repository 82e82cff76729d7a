// A long-running JVM with many VMAs, the target of `vmspace kernel reader-cost --pid` in docs/READER-COST.md:
// N threads that sleep (each thread's stack and its guard region are two VMAs that never merge with their
// neighbours), then the program prints "ready" and sleeps until it is killed. Single-file source launch:
//   java -Xss256k scripts/reader-cost/ManyVmas.java 4000
// (scripts/corpus/setup installs the JDK it needs.)
import java.util.concurrent.CountDownLatch;

public class ManyVmas {
    public static void main(String[] args) throws InterruptedException {
        int n = args.length > 0 ? Integer.parseInt(args[0]) : 4000;
        CountDownLatch started = new CountDownLatch(n);
        for (int i = 0; i < n; i++) {
            Thread t = new Thread(() -> {
                started.countDown();
                try {
                    Thread.sleep(Long.MAX_VALUE);
                } catch (InterruptedException e) {
                    // Ends the thread.
                }
            });
            t.setDaemon(true);
            t.start();
        }
        started.await();
        System.out.println("ready " + n);
        System.out.flush();
        Thread.sleep(Long.MAX_VALUE);
    }
}
