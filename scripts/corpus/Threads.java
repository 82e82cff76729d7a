// The shadow corpus's Java program (single-file source launch, `java Threads.java`): threads that allocate
// arrays of many sizes, so that the JVM's heap, TLABs, thread stacks and code cache all grow.
import java.util.ArrayList;
import java.util.List;

public class Threads {
    public static void main(String[] args) throws InterruptedException {
        List<Thread> ts = new ArrayList<>();
        final long[] sums = new long[4];
        for (int t = 0; t < 4; t++) {
            final int id = t;
            Thread th = new Thread(() -> {
                List<byte[]> keep = new ArrayList<>();
                for (int i = 0; i < 20000; i++) {
                    keep.add(new byte[16 << (i % 12)]);
                    if (keep.size() > 64) keep.subList(0, 32).clear();
                    sums[id] += keep.size();
                }
            });
            ts.add(th);
            th.start();
        }
        for (Thread th : ts) th.join();
        System.out.println("ok " + (sums[0] + sums[1] + sums[2] + sums[3]));
    }
}
