package org.ecstack.rainfs;

import static org.ecstack.rainfs.TestRainFileSystem.data;
import static org.ecstack.rainfs.TestRainFileSystem.read;
import static org.ecstack.rainfs.TestRainFileSystem.write;
import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.FileTime;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Stream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.junit.After;
import org.junit.Test;

/** The checker: failed and emptied NAS mounts, corrupt replicas, leaks, and a crash at every step of Algorithms 1–3. */
public class TestRainFsck {
  @After
  public void clearHooks() {
    RainFileSystem.crashPoint = null;
  }

  private static RainFsck.Report fsck(RainTestbed bed, boolean dryRun) throws IOException {
    return new RainFsck(RainConfig.load(bed.configFile), dryRun, true, 0).run();
  }

  private static List<byte[]> fill(FileSystem fs, int files) throws IOException {
    List<byte[]> out = new ArrayList<>();
    for (int i = 0; i < files; i++) {
      byte[] b = data(100 + i, 5000 + 911 * i);
      write(fs, new Path("/data/part-" + i), b);
      out.add(b);
    }
    return out;
  }

  private static void assertContents(FileSystem fs, List<byte[]> want) throws IOException {
    for (int i = 0; i < want.size(); i++) {
      assertArrayEquals("part-" + i, want.get(i), read(fs, new Path("/data/part-" + i)));
    }
  }

  private static void deleteTree(java.nio.file.Path p) throws IOException {
    try (Stream<java.nio.file.Path> s = Files.walk(p)) {
      for (java.nio.file.Path x : s.sorted(Comparator.reverseOrder()).toList()) {
        Files.delete(x);
      }
    }
  }

  @Test
  public void emptiedNasIsReReplicated() throws Exception {
    RainTestbed bed = new RainTestbed("emptied", 3, 2, 2);
    FileSystem fs = bed.fs();
    List<byte[]> want = fill(fs, 24);
    Invariants.check(bed, 2);
    deleteTree(bed.nas.get(1).resolve(RainConfig.DATA_DIR)); // the NAS came back empty
    assertContents(fs, want); // reads fail over meanwhile

    RainFsck.Report dry = fsck(bed, true);
    long under = dry.count("under-replicated");
    assertTrue("some files had a replica on nas1: " + dry.findings, under > 0);
    assertFalse(dry.consistent());
    assertFalse("a dry run changes nothing", Files.exists(bed.nas.get(1).resolve(RainConfig.DATA_DIR)));
    assertEquals(1, RainFsck.cli(new String[] {"fsck", "--config", bed.configFile.toString(), "--dry-run",
        "--timeout", "0", "--json"}));

    RainFsck.Report r = fsck(bed, false);
    assertEquals(under, r.count("under-replicated"));
    assertTrue(r.consistent());
    Invariants.check(bed, 2);
    assertContents(fs, want);
    assertEquals("a second run finds nothing", 0, fsck(bed, false).findings.size());
    assertEquals(0, RainFsck.cli(new String[] {"fsck", "--config", bed.configFile.toString(), "--timeout", "0"}));
  }

  @Test
  public void failedNasMountIsReplacedByTheOthers() throws Exception {
    RainTestbed bed = new RainTestbed("failed", 3, 2, 2);
    FileSystem fs = bed.fs();
    List<byte[]> want = fill(fs, 24);
    deleteTree(bed.nas.get(2)); // the mount point itself is gone
    assertContents(fs, want);
    RainFsck.Report r = fsck(bed, false);
    assertTrue(r.findings.toString(), r.count("under-replicated") > 0);
    assertTrue(r.consistent());
    assertFalse("fsck never creates a missing mount point", Files.exists(bed.nas.get(2)));
    Files.createDirectories(bed.nas.get(2)); // so Invariants can walk it: it must hold nothing
    Invariants.check(bed, 2);
    assertContents(fs, want);
  }

  @Test
  public void corruptReplicasAreFoundByCrcAndReplaced() throws Exception {
    RainTestbed bed = new RainTestbed("corrupt", 3, 2, 2);
    FileSystem fs = bed.fs();
    List<byte[]> want = fill(fs, 4);
    java.nio.file.Path flipped = Metadata.read(bed.namespace.resolve("data/part-1")).replicas.get(0);
    try (FileChannel ch = FileChannel.open(flipped, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
      java.nio.ByteBuffer one = java.nio.ByteBuffer.allocate(1);
      ch.read(one, 1000);
      one.flip();
      one.put(0, (byte) (one.get(0) ^ 0x40));
      ch.write(one, 1000);
    }
    java.nio.file.Path truncated = Metadata.read(bed.namespace.resolve("data/part-2")).replicas.get(1);
    try (FileChannel ch = FileChannel.open(truncated, StandardOpenOption.WRITE)) {
      ch.truncate(100);
    }
    // Without CRC checks only the length gives a replica away.
    RainFsck.Report quick = new RainFsck(RainConfig.load(bed.configFile), true, false, 0).run();
    assertEquals(quick.findings.toString(), 1, quick.count("corrupt-replica"));
    RainFsck.Report r = fsck(bed, false);
    assertEquals(r.findings.toString(), 2, r.count("corrupt-replica"));
    assertTrue(r.consistent());
    Invariants.check(bed, 2);
    assertContents(fs, want);
  }

  @Test
  public void leakedReplicasWaitForTheTimeoutAndLostFilesAreReported() throws Exception {
    RainTestbed bed = new RainTestbed("leak", 2, 2, 1);
    FileSystem fs = bed.fs();
    fill(fs, 2);
    java.nio.file.Path leak = Layout.replica(bed.nas.get(0), 1, 0x1234567L);
    Files.createDirectories(leak.getParent());
    Files.write(leak, new byte[10]);
    RainFsck.Report young = new RainFsck(RainConfig.load(bed.configFile), false, true, 600).run();
    assertEquals(0, young.findings.size());
    assertTrue(Files.exists(leak));
    Files.setLastModifiedTime(leak, FileTime.fromMillis(System.currentTimeMillis() - 3_600_000));
    RainFsck.Report r = new RainFsck(RainConfig.load(bed.configFile), false, true, 600).run();
    assertEquals(r.findings.toString(), 1, r.count("leaked-replica"));
    assertFalse(Files.exists(leak));
    Invariants.check(bed, 2);

    for (java.nio.file.Path p : Metadata.read(bed.namespace.resolve("data/part-0")).replicas) {
      Files.delete(p);
    }
    RainFsck.Report lost = fsck(bed, false);
    assertEquals(1, lost.count("lost"));
    assertFalse(lost.consistent());
  }

  static final class SimulatedCrash extends Error {
    SimulatedCrash(String where) {
      super("simulated crash at " + where);
    }
  }

  interface Action {
    void run(FileSystem fs) throws IOException;
  }

  interface Outcome {
    void check(FileSystem fs, byte[] data) throws IOException;
  }

  /**
   * Crash {@code op} at its first, second, ... numbered step until it runs through; after each crash, fsck must
   * leave a consistent RainFS whose state is the operation either done or not done. Returns the crash count.
   */
  private static int crashAtEveryStep(String op, Action setup, Action action, Outcome outcome) throws Exception {
    byte[] d = data(5, 70_000);
    int n = 1;
    for (; n < 100; n++) {
      RainTestbed bed = new RainTestbed("crash-" + op + "-" + n, 3, 2, 1);
      FileSystem fs = bed.fs();
      fs.mkdirs(new Path("/d"));
      setup.run(fs);
      write(fs, new Path("/d/keep"), d); // a bystander that must survive every repair
      AtomicInteger calls = new AtomicInteger();
      final int at = n;
      RainFileSystem.crashPoint = (alg, line) -> {
        if (alg.equals(op) && calls.incrementAndGet() == at) {
          throw new SimulatedCrash(op + " line " + line);
        }
      };
      boolean crashed = false;
      try {
        action.run(fs);
      } catch (SimulatedCrash e) {
        crashed = true;
      } finally {
        RainFileSystem.crashPoint = null;
      }
      if (!crashed) {
        break;
      }
      RainFsck.Report r = fsck(bed, false);
      assertTrue(op + " crash " + n + ": " + r.findings, r.consistent());
      Invariants.check(bed, 2);
      assertArrayEquals(d, read(fs, new Path("/d/keep")));
      outcome.check(fs, d);
      assertEquals(op + " crash " + n + ": second run", List.of(), fsck(bed, false).findings);
    }
    return n - 1;
  }

  @Test
  public void crashInCreateAtEveryStep() throws Exception {
    int crashes = crashAtEveryStep("create", fs -> { }, fs -> write(fs, new Path("/d/new"), data(9, 1000)),
        (fs, d) -> {
          if (fs.exists(new Path("/d/new"))) {
            assertEquals("a create that crashed before any write is an empty file",
                0, fs.getFileStatus(new Path("/d/new")).getLen());
          }
        });
    assertEquals("lines 3, 7, 8, 7, 8, 10, 11 and after 11", 8, crashes);
  }

  @Test
  public void crashInDeleteAtEveryStep() throws Exception {
    int crashes = crashAtEveryStep("delete", fs -> write(fs, new Path("/d/victim"), data(11, 50_000)),
        fs -> fs.delete(new Path("/d/victim"), false),
        (fs, d) -> {
          if (fs.exists(new Path("/d/victim"))) {
            assertArrayEquals(data(11, 50_000), read(fs, new Path("/d/victim")));
          }
        });
    assertEquals("lines 3, 4, 6, 6, 8 and after 8", 6, crashes);
  }

  @Test
  public void crashInMoveAtEveryStep() throws Exception {
    int crashes = crashAtEveryStep("move", fs -> write(fs, new Path("/d/a"), data(13, 40_000)),
        fs -> fs.rename(new Path("/d/a"), new Path("/d/b")),
        (fs, d) -> {
          boolean a = fs.exists(new Path("/d/a"));
          boolean b = fs.exists(new Path("/d/b"));
          assertTrue("exactly one of source and target", a ^ b);
          assertArrayEquals(data(13, 40_000), read(fs, new Path(a ? "/d/a" : "/d/b")));
        });
    assertEquals("lines 9, 10, 11 and after 11", 4, crashes);
  }
}
