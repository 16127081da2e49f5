package org.ecstack.rainfs;

import java.io.IOException;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * What the hung-NAS guard costs a healthy read: the same file read with {@code nasTimeoutMillis} = 0 (calls on
 * the reader's thread) and 30000 (every open, read and stat handed to a NAS thread), alternating, in one run.
 * Not a test (a benchmark; docs/benchmarks.md):
 * {@code mvn -q -B test-compile && java -cp target/test-classes:target/classes:$(cat target/classpath.txt)
 * org.ecstack.rainfs.NasGuardBench [MiB] [readBytes] [rounds]}
 */
public final class NasGuardBench {
  public static void main(String[] args) throws IOException {
    int mib = args.length > 0 ? Integer.parseInt(args[0]) : 64;
    int bufferBytes = args.length > 1 ? Integer.parseInt(args[1]) : 4096;
    int rounds = args.length > 2 ? Integer.parseInt(args[2]) : 5;
    RainTestbed bed = new RainTestbed("guard-bench", 1, 1, 0);
    FileSystem fs = bed.fs();
    byte[] chunk = TestRainFileSystem.data(1, 1 << 20);
    Path p = new Path("/bench");
    try (FSDataOutputStream out = fs.create(p, true)) {
      for (int i = 0; i < mib; i++) {
        out.write(chunk);
      }
    }
    double[] best = {Double.MAX_VALUE, Double.MAX_VALUE};
    long[] timeouts = {0, 30_000};
    for (int round = 0; round < rounds; round++) {
      for (int t = 0; t < 2; t++) {
        bed.nasTimeoutMillis = timeouts[t];
        bed.writeConfig(bed.nas, 1, 0, 0);
        long start = System.nanoTime();
        long n = 0;
        byte[] b = new byte[bufferBytes];
        try (FSDataInputStream in = fs.open(p, bufferBytes)) {
          for (int r; (r = in.read(b)) > 0; ) {
            n += r;
          }
        }
        double s = (System.nanoTime() - start) / 1e9;
        if (n != (long) mib << 20) {
          throw new IOException("read " + n + " bytes");
        }
        best[t] = Math.min(best[t], s);
        System.out.printf("round %d nasTimeoutMillis=%d: %.1f MB/s%n", round, timeouts[t], mib * 1.048576 / s);
      }
    }
    System.out.printf("best of %d, %d MiB in %d-byte reads: unguarded %.1f MB/s, guarded %.1f MB/s, ratio %.2f%n",
        rounds, mib, bufferBytes, mib * 1.048576 / best[0], mib * 1.048576 / best[1], best[1] / best[0]);
    bed.delete();
  }
}
