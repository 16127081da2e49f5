package org.ecstack.rainfs;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
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
 * The TeraSort suite's write, sort and read throughput by architecture, replication factor and number of NAS
 * systems, over an emulated network ({@link NasLink}): how client-level federation spreads I/O over NAS systems
 * (seed §2.6.1 goal 1) and how the seed's architectures (§2.3, Fig. 2.2, §2.7 Fig. 2.4) move the same bytes.
 *
 * <p>Two ways in. {@code ecstack experiment rainfs} runs {@link #main} (one CSV row per run, appended to
 * {@code --csv}); the long-mode JUnit test {@code mvn -q -B -Pterasort test -Dterasort.test=RainfsExperiment
 * [-Dexperiment.mbps=10 -Dterasort.rows=N]} runs RainFS over 1-4 NAS at r=1, 2 and writes
 * target/rainfs-experiment.md.
 */
public class RainfsExperiment {
  private static final long ROWS = Long.getLong("terasort.rows", 400_000L);
  private static final double MBPS = Double.parseDouble(System.getProperty("experiment.mbps", "10"));

  /** One run's settings. */
  static final class Setup {
    NasLink.Arch arch = NasLink.Arch.RAINFS;
    int nas = 4;
    int replication = 1;
    long rows = ROWS;
    int clients = 4;
    double nasMBps = MBPS;
    double clientMBps;
    double headMBps;
    double misplaced = 1.0 / 3;
    /** The NAS-bound mode of the first experiment: one shared link per NAS, no client links. */
    boolean sharedNasLink;

    NasLink links(List<java.nio.file.Path> mounts) {
      return sharedNasLink ? new NasLink(mounts, nasMBps)
          : new NasLink(mounts, nasMBps, arch, clients, clientMBps, headMBps, misplaced);
    }
  }

  /** One run's results: seconds per benchmark and network sends per data byte. */
  static final class Result {
    double gen;
    double sort;
    double validate;
    double genSends;
    double validateSends;
  }

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

  private static long sends(NasLink l) {
    return l.bytes(NasLink.CLIENT_OUT) + l.bytes(NasLink.NAS_OUT);
  }

  /** TeraGen, TeraSort and TeraValidate on a fresh RainFS testbed under {@code s}'s emulated network. */
  static Result runOnce(Setup s, String authority) throws Exception {
    RainTestbed bed = new RainTestbed("exp-" + authority, s.nas, s.replication, 4);
    // The emulated links delay a writer thread on purpose (a 1 MiB buffer behind a queue of others on a
    // 0.5 MB/s link takes seconds): that is bandwidth, not a hung NAS, so no NAS timeout here.
    bed.nasTimeoutMillis = 0;
    bed.writeConfig(bed.nas, s.replication, 4, 0);
    try {
      NasLink links = s.links(bed.nas);
      NasLink.install(links);
      Configuration c = conf(bed);
      String base = "rainfs://" + authority + "/tera";
      Result r = new Result();
      double bytes = s.rows * 100.0;
      r.gen = parallelTeraGen(c, base, s.rows, s.clients);
      r.genSends = sends(links) / bytes;
      r.sort = run(c, new TeraSort(), base + "/in", base + "/out");
      long before = sends(links);
      r.validate = run(c, new TeraValidate(), base + "/out", base + "/report");
      r.validateSends = (sends(links) - before) / bytes;
      NasLink.install(null);
      assertTrue("TeraValidate passed", validated(new Path(base).getFileSystem(c), new Path(base + "/report")));
      Invariants.check(bed, -1);
      return r;
    } finally {
      NasLink.install(null);
      bed.delete();
    }
  }

  private static void warmUp() throws Exception {
    RainTestbed warm = new RainTestbed("exp-warm", 1, 1, 0);
    try {
      run(conf(warm), new TeraGen(), "20000", "file://" + warm.root.resolve("w"));
      run(conf(warm), new TeraSort(), "file://" + warm.root.resolve("w"), "file://" + warm.root.resolve("ws"));
    } finally {
      warm.delete();
    }
  }

  @Test
  public void throughputByReplicationAndNasCount() throws Exception {
    double mb = ROWS * 100 / 1e6;
    List<String> rows = new ArrayList<>();
    rows.add("| NAS | r | TeraGen s | TeraGen MB/s | n·B/r | TeraSort s | TeraSort MB/s | TeraValidate s | TeraValidate MB/s |");
    rows.add("|---|---|---|---|---|---|---|---|---|");
    warmUp();
    for (int n = 1; n <= 4; n++) {
      for (int r = 1; r <= Math.min(2, n); r++) {
        Setup s = new Setup();
        s.nas = n;
        s.replication = r;
        s.sharedNasLink = true;
        Result res = runOnce(s, "n" + n + "r" + r);
        rows.add(String.format(Locale.ROOT, "| %d | %d | %.1f | %.1f | %.0f | %.1f | %.1f | %.1f | %.1f |", n, r,
            res.gen, mb / res.gen, n * MBPS / r, res.sort, mb / res.sort, res.validate, mb / res.validate));
      }
    }
    String text = String.format(Locale.ROOT, "RainFS experiment: %d rows (%.0f MB), each NAS behind an emulated"
        + " %.0f MB/s link (B), Hadoop local job runner; TeraGen as 4 concurrent jobs (one map each), TeraSort and TeraValidate with 8 MB splits and 4 reduces%n%n", ROWS, mb, MBPS)
        + String.join("\n", rows) + "\n";
    Files.writeString(java.nio.file.Paths.get("target", "rainfs-experiment.md"), text);
    System.out.println(text);
  }

  /**
   * {@code ecstack experiment rainfs} runs this: {@code --runs ARCH:NAS:R[:shared],... --rows N
   * --clients C --nas-mbps B --client-mbps BC --head-mbps H --misplaced F --shared-nas-mbps BS --csv FILE}. A run
   * with {@code :shared} is the NAS-bound setup (one shared link of BS per NAS, no client links, RainFS only).
   * Appends one CSV row per run (the header when the file is new); exits 1 with one line on stderr on any
   * failure.
   */
  public static void main(String[] args) throws Exception {
    Setup base = new Setup();
    List<String> runs = new ArrayList<>();
    java.nio.file.Path csv = null;
    double sharedMBps = base.nasMBps;
    try {
      for (int i = 0; i < args.length; i++) {
        String a = args[i];
        if (i + 1 >= args.length) {
          throw new IllegalArgumentException(a + " needs a value");
        }
        String v = args[++i];
        switch (a) {
          case "--runs" -> runs.addAll(List.of(v.split(",")));
          case "--rows" -> base.rows = Long.parseLong(v);
          case "--clients" -> base.clients = Integer.parseInt(v);
          case "--nas-mbps" -> base.nasMBps = Double.parseDouble(v);
          case "--shared-nas-mbps" -> sharedMBps = Double.parseDouble(v);
          case "--client-mbps" -> base.clientMBps = Double.parseDouble(v);
          case "--head-mbps" -> base.headMBps = Double.parseDouble(v);
          case "--misplaced" -> base.misplaced = Double.parseDouble(v);
          case "--csv" -> csv = java.nio.file.Paths.get(v);
          default -> throw new IllegalArgumentException("unknown option " + a);
        }
      }
      if (runs.isEmpty() || csv == null) {
        throw new IllegalArgumentException("--runs and --csv are required");
      }
      // Quiet Hadoop's job logging: the report is the CSV.
      org.apache.log4j.Logger.getRootLogger().setLevel(org.apache.log4j.Level.WARN);
      warmUp();
      if (!Files.exists(csv)) {
        Files.writeString(csv, "links,arch,nas,clients,replication,rows,mb,nas_mbps,client_mbps,head_mbps,"
            + "teragen_s,terasort_s,teravalidate_s,teragen_sends_per_byte,teravalidate_sends_per_byte\n");
      }
      int id = 0;
      for (String spec : runs) {
        String[] p = spec.split(":");
        if (p.length < 3 || p.length > 4 || (p.length == 4 && !p[3].equals("shared"))) {
          throw new IllegalArgumentException("a run is ARCH:NAS:R or ARCH:NAS:R:shared, not " + spec);
        }
        Setup s = new Setup();
        s.arch = NasLink.Arch.parse(p[0]);
        s.nas = Integer.parseInt(p[1]);
        s.replication = Integer.parseInt(p[2]);
        s.rows = base.rows;
        s.clients = base.clients;
        s.nasMBps = base.nasMBps;
        s.clientMBps = base.clientMBps;
        s.headMBps = base.headMBps;
        s.misplaced = base.misplaced;
        s.sharedNasLink = p.length == 4;
        if (s.sharedNasLink) {
          if (s.arch != NasLink.Arch.RAINFS) {
            throw new IllegalArgumentException(":shared runs are RainFS's only: " + spec);
          }
          s.nasMBps = sharedMBps;
          s.clientMBps = 0;
          s.headMBps = 0;
        }
        System.err.printf(Locale.ROOT, "rainfs experiment: %s, %d NAS, r=%d, %d rows ...%n", s.arch.label, s.nas,
            s.replication, s.rows);
        Result r = runOnce(s, "run" + (id++) + "-" + ProcessHandle.current().pid());
        String line = String.format(Locale.ROOT, "%s,%s,%d,%d,%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.4f,%.4f%n",
            s.sharedNasLink ? "nas-only" : "client+nas", s.arch.label, s.nas, s.clients, s.replication, s.rows, s.rows * 100 / 1e6, s.nasMBps, s.clientMBps,
            s.headMBps, r.gen, r.sort, r.validate, r.genSends, r.validateSends);
        Files.writeString(csv, line, StandardOpenOption.APPEND);
        System.err.printf(Locale.ROOT, "  TeraGen %.1f s, TeraSort %.1f s, TeraValidate %.1f s%n", r.gen, r.sort,
            r.validate);
      }
    } catch (Throwable t) {
      System.err.println("rainfs experiment: " + t);
      System.exit(1);
    }
    System.exit(0); // Hadoop leaves non-daemon threads behind
  }

  /**
   * Hadoop's local job runner forces one map per job (LocalClientProtocolProvider sets mapreduce.job.maps to
   * 1), so one TeraGen would be one writer. {@code writers} clients write instead: as many TeraGen jobs at
   * once, rows/writers each, writer i acting as client i (TeraGen always starts at row 0, so their rows are the
   * same; TeraSort and TeraValidate accept duplicates), and their part files move into one input directory
   * (Algorithm 3). Returns the wall time of the writes.
   */
  private static double parallelTeraGen(Configuration c, String base, long rows, int writers) throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(writers);
    List<Future<Double>> jobs = new ArrayList<>();
    long t0 = System.nanoTime();
    for (int i = 0; i < writers; i++) {
      final String out = base + "/gen-" + i;
      final int client = i;
      jobs.add(pool.submit(() -> {
        NasLink.actAsClient(client);
        return run(c, new TeraGen(), Long.toString(rows / writers), out);
      }));
    }
    for (Future<Double> j : jobs) {
      j.get();
    }
    double wall = (System.nanoTime() - t0) / 1e9;
    pool.shutdown();
    FileSystem fs = new Path(base).getFileSystem(c);
    assertTrue(fs.mkdirs(new Path(base + "/in")));
    for (int i = 0; i < writers; i++) {
      assertTrue(fs.rename(new Path(base + "/gen-" + i + "/part-m-00000"),
          new Path(base + "/in/part-m-" + String.format(Locale.ROOT, "%05d", i))));
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
