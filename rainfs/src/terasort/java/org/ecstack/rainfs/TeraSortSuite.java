package org.ecstack.rainfs;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.examples.terasort.TeraChecksum;
import org.apache.hadoop.examples.terasort.TeraGen;
import org.apache.hadoop.examples.terasort.TeraSort;
import org.apache.hadoop.examples.terasort.TeraValidate;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.util.Tool;
import org.apache.hadoop.util.ToolRunner;
import org.junit.Test;

/**
 * The seed's evaluation suite (§2.7.2): TeraGen (write), TeraSort (compute), TeraValidate (read) in Hadoop's
 * local job runner, on file:// and on rainfs:// at replication 1 and 2 over three "NAS" directories, in one
 * run; then TeraSort at replication 2 while one NAS goes away. Long mode, not CI:
 * {@code mvn -q -B -Pterasort test -Dterasort.rows=N}; the table is written to target/terasort.md.
 */
public class TeraSortSuite {
  private static final long ROWS = Long.getLong("terasort.rows", 1_000_000L);
  private final List<String> table = new ArrayList<>();
  /** What the fault runs found, printed after the table. */
  private final List<String> notes = new ArrayList<>();
  private double lostAfter;

  private static Configuration jobConf(RainTestbed bed) {
    Configuration c = bed.conf();
    c.set("mapreduce.framework.name", "local");
    c.set("hadoop.tmp.dir", bed.root.resolve("hadoop-tmp").toString());
    c.setInt("mapreduce.job.maps", 2);
    c.setInt("mapreduce.job.reduces", 2);
    c.setInt("mapreduce.local.map.tasks.maximum", 2);
    c.setInt("mapreduce.local.reduce.tasks.maximum", 2);
    c.setLong("fs.rainfs.block.size", 32L << 20);
    c.setLong("fs.local.block.size", 32L << 20);
    return c;
  }

  private static double run(Configuration c, Tool tool, String... args) throws Exception {
    long t0 = System.nanoTime();
    int rc = ToolRunner.run(new Configuration(c), tool, args);
    double s = (System.nanoTime() - t0) / 1e9;
    assertEquals(tool.getClass().getSimpleName() + " " + String.join(" ", args), 0, rc);
    return s;
  }

  /** The one output line of TeraValidate / TeraChecksum with the given key, or null. */
  private static String reportValue(FileSystem fs, Path dir, String key) throws IOException {
    for (FileStatus st : fs.listStatus(dir)) {
      if (!st.getPath().getName().startsWith("part-")) {
        continue;
      }
      try (BufferedReader r = new BufferedReader(new InputStreamReader(fs.open(st.getPath()),
          StandardCharsets.UTF_8))) {
        for (String line; (line = r.readLine()) != null; ) {
          if (key == null && !line.isEmpty()) {
            return line; // TeraChecksum writes the checksum alone
          }
          if (key != null && line.startsWith(key + "\t")) {
            return line.substring(key.length() + 1);
          }
        }
      }
    }
    return null;
  }

  private double[] suite(String label, Configuration c, String base, Runnable duringSort) throws Exception {
    FileSystem fs = new Path(base).getFileSystem(c);
    double mb = ROWS * 100 / 1e6;
    double gen = run(c, new TeraGen(), Long.toString(ROWS), base + "/in");
    run(c, new TeraChecksum(), base + "/in", base + "/in-sum");
    double sort;
    if (duringSort == null) {
      sort = run(c, new TeraSort(), base + "/in", base + "/out");
    } else {
      ExecutorService ex = Executors.newSingleThreadExecutor();
      long t0 = System.nanoTime();
      Future<Double> f = ex.submit(() -> run(c, new TeraSort(), base + "/in", base + "/out"));
      // Strike once the job has set up its output (the committer's _temporary): its tasks are running.
      Path started = new Path(base + "/out/_temporary");
      while (!fs.exists(started) && !f.isDone() && System.nanoTime() - t0 < 600e9) {
        Thread.sleep(5);
      }
      assertFalse("the fault must hit while TeraSort runs", f.isDone());
      duringSort.run();
      lostAfter = (System.nanoTime() - t0) / 1e9;
      sort = f.get(30, TimeUnit.MINUTES);
      ex.shutdown();
    }
    double validate = run(c, new TeraValidate(), base + "/out", base + "/report");
    assertEquals("TeraValidate: out of order", null, reportValue(fs, new Path(base + "/report"), "error"));
    String want = reportValue(fs, new Path(base + "/in-sum"), null);
    String got = reportValue(fs, new Path(base + "/report"), "checksum");
    assertTrue("checksums present", want != null && got != null);
    assertEquals("sorted output holds exactly the generated rows", want, got);
    table.add(String.format(Locale.ROOT, "| %s | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |", label, mb,
        gen, mb / gen, sort, mb / sort, validate, mb / validate));
    return new double[] {gen, sort, validate};
  }

  @Test
  public void teraSortOnFileAndRainfsAtReplicationOneAndTwo() throws Exception {
    table.add("| setup | MB | TeraGen s | MB/s | TeraSort s | MB/s | TeraValidate s | MB/s |");
    table.add("|---|---|---|---|---|---|---|---|");
    // Warm the JVM and Hadoop's classes first, so the first timed setup is not charged for them.
    RainTestbed warm = new RainTestbed("tera-warm", 1, 1, 0);
    run(jobConf(warm), new TeraGen(), "10000", "file://" + warm.root.resolve("w"));
    run(jobConf(warm), new TeraSort(), "file://" + warm.root.resolve("w"), "file://" + warm.root.resolve("ws"));
    RainTestbed local = new RainTestbed("tera-file", 1, 1, 0);
    suite("file://", jobConf(local), "file://" + local.root.resolve("file-fs"), null);

    RainTestbed r1 = new RainTestbed("tera-r1", 3, 1, 4);
    suite("rainfs r=1, 3 NAS", jobConf(r1), "rainfs://r1/tera", null); // one authority per testbed: Hadoop caches a FileSystem per scheme + authority
    Invariants.check(r1, -1);

    RainTestbed r2 = new RainTestbed("tera-r2", 3, 2, 4);
    suite("rainfs r=2, 3 NAS", jobConf(r2), "rainfs://r2/tera", null);
    Invariants.check(r2, -1);

    // One NAS goes away during TeraSort at replication 2: its directory moves aside (as a lazy unmount:
    // open files stay writable, new opens fail) and the administrator drops it from the configuration,
    // which every RainFS call re-reads. Reads fail over; the job completes; fsck restores the factor.
    RainTestbed f2 = new RainTestbed("tera-fail", 3, 2, 4);
    java.nio.file.Path gone = f2.nas.get(2);
    suite("rainfs r=2, NAS lost mid-sort", jobConf(f2), "rainfs://lost/tera", () -> {
      try {
        Files.move(gone, gone.resolveSibling("nas2.gone"));
        f2.writeConfig(f2.nas.subList(0, 2), 2, 4, 0);
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
    });
    RainFsck.Report r = new RainFsck(RainConfig.load(f2.configFile), false, true, 0).run();
    notes.add(String.format(Locale.ROOT, "NAS lost %.1f s into TeraSort (job %s); after the job, fsck found %d"
        + " problems (%d under-replicated files, %d missing replica entries), consistent: %s", lostAfter,
        "completed, TeraValidate passed", r.findings.size(), r.count("under-replicated"),
        r.count("missing-replica"), r.consistent()));
    assertTrue("files lost a replica on the failed NAS", r.count("under-replicated") > 0);
    assertTrue(r.findings.toString(), r.consistent());
    assertFalse(Files.exists(gone));
    Files.createDirectories(gone);
    Invariants.check(f2, -1);

    // One NAS hangs during TeraSort at replication 2 (a hard-mounted NFS whose server stops answering): every
    // call on it blocks until the end of the run (NasGuard's stall hook holds its I/O threads), and nobody
    // touches the configuration. Calls on it time out after nasTimeoutMillis; reads fail over, creates draw a
    // placement without it; the job completes and TeraValidate passes. Then the NAS answers again.
    RainTestbed h2 = new RainTestbed("tera-hung", 3, 2, 4);
    h2.nasTimeoutMillis = 1000;
    h2.writeConfig(h2.nas, 2, 4, 0);
    // The NAS to hang: one that holds replica 0 of an input file (so TeraSort's maps must fail over), other
    // than the managing NAS (a hung namespace hangs every call, as the docs say). Chosen when the fault strikes.
    java.util.concurrent.atomic.AtomicReference<java.nio.file.Path> hungRef =
        new java.util.concurrent.atomic.AtomicReference<>(h2.nas.get(2));
    java.util.concurrent.CountDownLatch answer = new java.util.concurrent.CountDownLatch(1);
    long timeouts = NasGuard.TIMEOUTS.get();
    long skips = NasGuard.SUSPECT_SKIPS.get();
    long failovers = FailoverInputStream.FAILOVERS.get();
    try {
      suite("rainfs r=2, NAS hung mid-sort", jobConf(h2), "rainfs://hung/tera", () -> {
        try (java.util.stream.Stream<java.nio.file.Path> in = Files.list(h2.namespace.resolve("tera/in"))) {
          for (java.nio.file.Path e : (Iterable<java.nio.file.Path>) in::iterator) {
            if (e.getFileName().toString().startsWith("part-") && Files.isSymbolicLink(e)) {
              java.nio.file.Path r0 = Metadata.read(e).replicas.get(0);
              if (!r0.startsWith(h2.nas.get(0))) {
                hungRef.set(Layout.nasOf(r0));
                break;
              }
            }
          }
        } catch (IOException e) {
          throw new RuntimeException(e);
        }
        java.nio.file.Path hungNas = hungRef.get();
        NasGuard.stall = nas -> {
          if (nas.equals(hungNas)) {
            try {
              answer.await();
            } catch (InterruptedException e) {
              Thread.currentThread().interrupt();
            }
          }
        };
      });
    } finally {
      NasGuard.stall = null;
      answer.countDown();
    }
    double hungAfter = lostAfter;
    NasGuard hung = NasGuard.ofMount(hungRef.get());
    for (int i = 0; i < 1000 && (hung.isSuspect() || hung.hungCalls() > 0); i++) {
      Thread.sleep(10);
    }
    assertFalse("the NAS answers again", hung.isSuspect());
    long t = NasGuard.TIMEOUTS.get() - timeouts;
    assertTrue("calls on the hung NAS timed out", t > 0);
    RainFsck.Report rh = new RainFsck(RainConfig.load(h2.configFile), false, true, 0).run();
    assertTrue(rh.findings.toString(), rh.consistent());
    Invariants.check(h2, -1);
    notes.add(String.format(Locale.ROOT, "NAS hung %.1f s into TeraSort, until the end of TeraValidate (job"
        + " completed, TeraValidate passed): %d calls timed out after 1 s, %d skipped it at once, %d reads failed"
        + " over; after it answered, fsck found %d problems, consistent: %s", hungAfter, t,
        NasGuard.SUSPECT_SKIPS.get() - skips, FailoverInputStream.FAILOVERS.get() - failovers,
        rh.findings.size(), rh.consistent()));

    String text = "TeraSort suite, " + ROWS + " rows (" + (ROWS * 100 / 1_000_000) + " MB), Hadoop local job"
        + " runner, 2 maps / 2 reduces\n\n" + String.join("\n", table) + "\n\n" + String.join("\n\n", notes) + "\n";
    Files.writeString(java.nio.file.Paths.get("target", "terasort.md"), text);
    for (RainTestbed bed : List.of(warm, local, r1, r2, f2, h2)) {
      bed.delete();
    }
    System.out.println(text);
  }
}
