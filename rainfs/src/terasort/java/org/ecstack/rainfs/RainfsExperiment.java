package org.ecstack.rainfs;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.examples.terasort.TeraGen;
import org.apache.hadoop.examples.terasort.TeraSort;
import org.apache.hadoop.examples.terasort.TeraValidate;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.util.Tool;
import org.apache.hadoop.util.ToolRunner;
import org.junit.After;
import org.junit.Test;

/**
 * The TeraSort suite's write, sort and read throughput by replication factor and number of NAS systems, each
 * NAS behind an emulated link of fixed bandwidth ({@link NasLink}): how client-level federation spreads
 * I/O over NAS systems (seed §2.6.1 goal 1, §2.7). Long mode:
 * {@code mvn -q -B -Pterasort test -Dterasort.test=RainfsExperiment [-Dexperiment.mbps=10 -Dterasort.rows=N]};
 * the table goes to target/rainfs-experiment.md.
 */
public class RainfsExperiment {
  private static final long ROWS = Long.getLong("terasort.rows", 400_000L);
  private static final double MBPS = Double.parseDouble(System.getProperty("experiment.mbps", "10"));

  @After
  public void unthrottle() {
    NasLink.install(null);
  }

  private static double run(Configuration c, Tool tool, String... args) throws Exception {
    long t0 = System.nanoTime();
    assertEquals(tool.getClass().getSimpleName(), 0, ToolRunner.run(new Configuration(c), tool, args));
    return (System.nanoTime() - t0) / 1e9;
  }

  private static boolean validated(FileSystem fs, Path report) throws Exception {
    boolean checksum = false;
    for (FileStatus st : fs.listStatus(report)) {
      if (!st.getPath().getName().startsWith("part-")) {
        continue;
      }
      try (BufferedReader r = new BufferedReader(new InputStreamReader(fs.open(st.getPath()),
          StandardCharsets.UTF_8))) {
        for (String line; (line = r.readLine()) != null; ) {
          if (line.startsWith("error\t")) {
            return false;
          }
          checksum |= line.startsWith("checksum\t");
        }
      }
    }
    return checksum;
  }

  @Test
  public void throughputByReplicationAndNasCount() throws Exception {
    double mb = ROWS * 100 / 1e6;
    List<String> rows = new ArrayList<>();
    rows.add("| NAS | r | TeraGen s | TeraGen MB/s | n·B/r | TeraSort s | TeraSort MB/s | TeraValidate s | TeraValidate MB/s |");
    rows.add("|---|---|---|---|---|---|---|---|---|");
    // Warm-up, unthrottled and untimed.
    RainTestbed warm = new RainTestbed("exp-warm", 1, 1, 0);
    run(conf(warm), new TeraGen(), "20000", "file://" + warm.root.resolve("w"));
    for (int n = 1; n <= 4; n++) {
      for (int r = 1; r <= Math.min(2, n); r++) {
        RainTestbed bed = new RainTestbed("exp-n" + n + "-r" + r, n, r, 4);
        NasLink.install(new NasLink(bed.nas, MBPS));
        Configuration c = conf(bed);
        String base = "rainfs://n" + n + "r" + r + "/tera";
        double gen = parallelTeraGen(c, base);
        double sort = run(c, new TeraSort(), base + "/in", base + "/out");
        double val = run(c, new TeraValidate(), base + "/out", base + "/report");
        NasLink.install(null);
        assertTrue("TeraValidate passed", validated(new Path(base).getFileSystem(c), new Path(base + "/report")));
        Invariants.check(bed, -1);
        bed.delete();
        rows.add(String.format(Locale.ROOT, "| %d | %d | %.1f | %.1f | %.0f | %.1f | %.1f | %.1f | %.1f |", n, r,
            gen, mb / gen, n * MBPS / r, sort, mb / sort, val, mb / val));
      }
    }
    String text = String.format(Locale.ROOT, "RainFS experiment: %d rows (%.0f MB), each NAS behind an emulated"
        + " %.0f MB/s link (B), Hadoop local job runner; TeraGen as 4 concurrent jobs (one map each), TeraSort and TeraValidate with 8 MB splits and 4 reduces%n%n", ROWS, mb, MBPS)
        + String.join("\n", rows) + "\n";
    Files.writeString(java.nio.file.Paths.get("target", "rainfs-experiment.md"), text);
    warm.delete();
    System.out.println(text);
  }

  /**
   * Hadoop's local job runner forces one map per job (LocalClientProtocolProvider sets mapreduce.job.maps to
   * 1), so one TeraGen would be one writer. Four clients write instead: four TeraGen jobs at once, rows/4 each
   * (TeraGen always starts at row 0, so their rows are the same; TeraSort and TeraValidate accept duplicates),
   * and their part files move into one input directory (Algorithm 3). Returns the wall time of the writes.
   */
  private static double parallelTeraGen(Configuration c, String base) throws Exception {
    int writers = 4;
    java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(writers);
    List<java.util.concurrent.Future<Double>> jobs = new ArrayList<>();
    long t0 = System.nanoTime();
    for (int i = 0; i < writers; i++) {
      final String out = base + "/gen-" + i;
      jobs.add(pool.submit(() -> run(c, new TeraGen(), Long.toString(ROWS / writers), out)));
    }
    for (java.util.concurrent.Future<Double> j : jobs) {
      j.get();
    }
    double wall = (System.nanoTime() - t0) / 1e9;
    pool.shutdown();
    FileSystem fs = new Path(base).getFileSystem(c);
    assertTrue(fs.mkdirs(new Path(base + "/in")));
    for (int i = 0; i < writers; i++) {
      assertTrue(fs.rename(new Path(base + "/gen-" + i + "/part-m-00000"), new Path(base + "/in/part-m-0000" + i)));
      assertTrue(fs.delete(new Path(base + "/gen-" + i), true));
    }
    return wall;
  }

  private static Configuration conf(RainTestbed bed) {
    Configuration c = bed.conf();
    c.set("mapreduce.framework.name", "local");
    c.set("hadoop.tmp.dir", bed.root.resolve("hadoop-tmp").toString());
    c.setInt("mapreduce.job.maps", 8);
    c.setInt("mapreduce.job.reduces", 4);
    c.setInt("mapreduce.local.map.tasks.maximum", 8);
    c.setInt("mapreduce.local.reduce.tasks.maximum", 4);
    c.setLong("fs.rainfs.block.size", 8L << 20);
    return c;
  }
}
