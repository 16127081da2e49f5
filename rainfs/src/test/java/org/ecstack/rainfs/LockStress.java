package org.ecstack.rainfs;

import java.net.URI;
import java.util.Random;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * One client process of {@code TestRainFileSystem#clientProcessesShareOneNamespaceUnderNasLocks}: random
 * creates, renames and deletes on a few names in one directory, seeded. Prints "done C R D" and exits 0.
 */
public final class LockStress {
  private LockStress() {}

  public static void main(String[] args) throws Exception {
    Configuration conf = new Configuration();
    conf.set(RainFileSystem.CONFIG_KEY, args[0]);
    long seed = Long.parseLong(args[1]);
    int ops = Integer.parseInt(args[2]);
    FileSystem fs = FileSystem.newInstance(URI.create("rainfs:///"), conf);
    Random rnd = new Random(seed);
    int[] done = new int[3];
    for (int i = 0; i < ops; i++) {
      Path a = new Path("/p/n" + rnd.nextInt(4));
      Path b = new Path("/p/n" + rnd.nextInt(4));
      switch (rnd.nextInt(3)) {
        case 0 -> {
          try (FSDataOutputStream out = fs.create(a, true)) {
            out.write((a.getName() + ":" + seed + ":" + i).getBytes());
          }
          done[0]++;
        }
        case 1 -> done[1] += fs.rename(a, b) ? 1 : 0;
        default -> done[2] += fs.delete(a, false) ? 1 : 0;
      }
    }
    System.out.println("done " + done[0] + " " + done[1] + " " + done[2]);
  }
}
