package org.ecstack.rainfs;

import static org.ecstack.rainfs.TestRainFileSystem.data;
import static org.ecstack.rainfs.TestRainFileSystem.write;
import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.util.concurrent.CountDownLatch;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.IOUtils;
import org.junit.After;
import org.junit.Test;

/**
 * A NAS that hangs instead of failing (a hard-mounted NFS whose server stopped answering): calls on it are
 * abandoned after {@code nasTimeoutMillis}, reads fail over, writes fail, the NAS is suspect (skipped at once,
 * no new thread blocks on it) until an abandoned call returns. The first test hangs for real: replica 0 is a
 * FIFO with no writer, whose open(2) blocks in the kernel as an NFS call does. The others stall a NAS through
 * the {@link NasGuard#stall} hook, which blocks the I/O thread the same way.
 */
public class TestHungNas {
  private static final long TIMEOUT_MILLIS = 300;

  @After
  public void clearHooks() {
    NasGuard.stall = null;
  }

  private static RainTestbed bed(String name) throws IOException {
    RainTestbed bed = new RainTestbed(name, 3, 2, 2);
    bed.nasTimeoutMillis = TIMEOUT_MILLIS;
    bed.writeConfig(bed.nas, 2, 2, 0);
    return bed;
  }

  private static void mkfifo(java.nio.file.Path p) throws Exception {
    Process mk = new ProcessBuilder("mkfifo", p.toString()).inheritIO().start();
    assertEquals("mkfifo " + p, 0, mk.waitFor());
  }

  /** Read {@code len} bytes and then EOF, without asking getFileStatus first (its stat of a FIFO says 0). */
  private static byte[] readAll(FileSystem fs, Path p, int len) throws IOException {
    byte[] b = new byte[len];
    try (FSDataInputStream in = fs.open(p)) {
      IOUtils.readFully(in, b, 0, len);
      assertEquals("bytes past the length of " + p, -1, in.read());
    }
    return b;
  }

  /** The NAS answered: its abandoned calls returned and it is no longer suspect. */
  private static void awaitAnswered(NasGuard g) throws InterruptedException {
    for (int i = 0; i < 1000 && (g.isSuspect() || g.hungCalls() > 0); i++) {
      Thread.sleep(10);
    }
    assertFalse("the NAS answered, but is still suspect", g.isSuspect());
    assertEquals(0, g.hungCalls());
  }

  @Test(timeout = 60_000)
  public void aHungReplicaZeroIsAbandonedReadsFailOverAndTheNasIsSkippedUntilItAnswers() throws Exception {
    RainTestbed bed = bed("hung-read");
    FileSystem fs = bed.fs();
    byte[] b = data(11, (3 << 20) + 12345);
    Path f = new Path("/f");
    write(fs, f, b);
    java.nio.file.Path r0 = Metadata.read(bed.namespace.resolve("f")).replicas.get(0);
    NasGuard g = NasGuard.of(r0);
    java.nio.file.Path saved = bed.root.resolve("replica0.saved");
    Files.move(r0, saved);
    mkfifo(r0);
    long timeouts = NasGuard.TIMEOUTS.get();
    long skips = NasGuard.SUSPECT_SKIPS.get();
    long failovers = FailoverInputStream.FAILOVERS.get();

    // Opening a FIFO with no writer blocks in open(2), like any call on a hard-mounted NFS whose server is gone.
    assertArrayEquals(b, readAll(fs, f, b.length));
    assertEquals("the open of replica 0 timed out", 1, NasGuard.TIMEOUTS.get() - timeouts);
    assertTrue(g.isSuspect());
    assertEquals(1, g.hungCalls());

    // Later calls skip the suspect NAS at once: no more threads block on it, however many reads there are.
    for (int i = 0; i < 20; i++) {
      assertArrayEquals(b, readAll(fs, f, b.length));
    }
    assertEquals(b.length, fs.getFileStatus(f).getLen()); // stat skips replica 0 too
    assertEquals("no further timeouts", 1, NasGuard.TIMEOUTS.get() - timeouts);
    assertTrue(NasGuard.SUSPECT_SKIPS.get() - skips >= 21);
    assertTrue("every read failed over", FailoverInputStream.FAILOVERS.get() - failovers >= 21);
    assertEquals(1, g.hungCalls());
    assertTrue(g.threads() <= NasGuard.THREADS_PER_NAS_MAX);

    // Creates avoid the suspect NAS: Algorithm 1 draws rndID again while its placement needs it (as on a
    // collision), so every create succeeds on the other two NAS without waiting for the hung one.
    for (int i = 0; i < 30; i++) {
      write(fs, new Path("/n" + i), data(i, 1000));
      for (java.nio.file.Path r : Metadata.read(bed.namespace.resolve("n" + i)).replicas) {
        assertFalse("replica on the suspect NAS: " + r, r.startsWith(g.nas));
      }
    }
    // When every placement needs it (2 NAS, r = 2), a create fails at once, as on a failed NAS, and leaves
    // nothing behind.
    java.nio.file.Path other = bed.nas.stream().filter(n -> !n.equals(g.nas)).findFirst().get();
    bed.writeConfig(java.util.List.of(g.nas, other), 2, 2, 0);
    try {
      write(fs, new Path("/x"), data(99, 1000));
      fail("a create that needs a hung NAS must fail");
    } catch (IOException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("not answering"));
    }
    assertFalse(fs.exists(new Path("/x")));
    bed.writeConfig(bed.nas, 2, 2, 0);
    assertEquals("creates time out no call: they skip the NAS", 1, NasGuard.TIMEOUTS.get() - timeouts);

    // The NAS answers: a writer opens the FIFO, the abandoned open returns (and closes what it opened), and
    // the NAS is healthy again. Replica 0 comes back; reads use it with no timeout and no skip.
    try (FileOutputStream answer = new FileOutputStream(r0.toFile())) {
      answer.flush();
    }
    awaitAnswered(g);
    Files.delete(r0);
    Files.move(saved, r0);
    timeouts = NasGuard.TIMEOUTS.get();
    skips = NasGuard.SUSPECT_SKIPS.get();
    assertArrayEquals(b, readAll(fs, f, b.length));
    assertEquals(timeouts, NasGuard.TIMEOUTS.get());
    assertEquals(skips, NasGuard.SUSPECT_SKIPS.get());
    Invariants.check(bed, 2);
  }

  @Test(timeout = 60_000)
  public void aReadThatHangsMidStreamFailsOverAtTheSamePosition() throws Exception {
    RainTestbed bed = bed("hung-midread");
    FileSystem fs = bed.fs();
    byte[] b = data(12, 3 << 20);
    write(fs, new Path("/m"), b);
    java.nio.file.Path r0 = Metadata.read(bed.namespace.resolve("m")).replicas.get(0);
    NasGuard g = NasGuard.of(r0);
    CountDownLatch answer = new CountDownLatch(1);
    byte[] got = new byte[b.length];
    try (FSDataInputStream in = fs.open(new Path("/m"))) {
      IOUtils.readFully(in, got, 0, 1 << 20);
      NasGuard.stall = nas -> {
        if (nas.equals(g.nas)) {
          awaitQuietly(answer);
        }
      };
      IOUtils.readFully(in, got, 1 << 20, b.length - (1 << 20));
    }
    assertArrayEquals(b, got);
    assertTrue(g.isSuspect());
    answer.countDown();
    awaitAnswered(g);
  }

  @Test(timeout = 60_000)
  public void aWriteThatHangsFailsTheStreamAndFsckCompletesTheFile() throws Exception {
    RainTestbed bed = bed("hung-write");
    FileSystem fs = bed.fs();
    byte[] b = data(13, 3 << 20);
    FSDataOutputStream out = fs.create(new Path("/w"), true);
    java.nio.file.Path r1 = Metadata.read(bed.namespace.resolve("w")).replicas.get(1);
    NasGuard g = NasGuard.of(r1);
    out.write(b, 0, 2 << 20);
    out.hflush();
    CountDownLatch answer = new CountDownLatch(1);
    NasGuard.stall = nas -> {
      if (nas.equals(g.nas)) {
        awaitQuietly(answer);
      }
    };
    try {
      out.write(b, 2 << 20, 1 << 20);
      out.close();
      fail("a write to a hung NAS must fail the stream, not block it");
    } catch (IOException expected) {
      assertTrue(expected.getMessage(), expected.getMessage().contains(r1.toString()));
      assertTrue(expected.getMessage(), expected.getMessage().contains("did not answer"));
    }
    assertTrue(g.isSuspect());
    assertFalse("metadata stays open after a failed write", Metadata.read(bed.namespace.resolve("w")).closed);
    NasGuard.stall = null;
    answer.countDown();
    awaitAnswered(g);
    RainFsck.Report r = new RainFsck(RainConfig.load(bed.configFile), false, true, 0).run();
    assertEquals(r.findings.toString(), 1, r.count("partial-write"));
    assertTrue(r.consistent());
    Invariants.check(bed, 2);
    assertArrayEquals(b, TestRainFileSystem.read(fs, new Path("/w")));
  }

  @Test(timeout = 60_000)
  public void fsckTreatsAHungNasAsUnavailableAndSweepsItOnceItAnswers() throws Exception {
    RainTestbed bed = bed("hung-fsck");
    FileSystem fs = bed.fs();
    byte[] b = data(14, 100_000);
    write(fs, new Path("/g"), b);
    java.nio.file.Path r0 = Metadata.read(bed.namespace.resolve("g")).replicas.get(0);
    NasGuard g = NasGuard.of(r0);
    // A FIFO would not do here: fsck stats a replica first, and stat(2) of a FIFO does not block.
    CountDownLatch answer = new CountDownLatch(1);
    NasGuard.stall = nas -> {
      if (nas.equals(g.nas)) {
        awaitQuietly(answer);
      }
    };

    RainFsck.Report r = new RainFsck(RainConfig.load(bed.configFile), false, true, 0).run();
    assertEquals(r.findings.toString(), 1, r.count("hung-nas"));
    assertEquals(r.findings.toString(), 1, r.count("under-replicated"));
    assertFalse("a hung NAS stays unresolved", r.consistent());
    Metadata m = Metadata.read(bed.namespace.resolve("g"));
    assertEquals(2, m.replicas.size());
    for (java.nio.file.Path rep : m.replicas) {
      assertFalse("replica on the hung NAS: " + rep, rep.startsWith(g.nas));
    }
    assertArrayEquals(b, TestRainFileSystem.read(fs, new Path("/g")));

    // The NAS answers: the next run sweeps what no file lists any more (the old replica 0), and all is well.
    NasGuard.stall = null;
    answer.countDown();
    awaitAnswered(g);
    r = new RainFsck(RainConfig.load(bed.configFile), false, true, 0).run();
    assertEquals(r.findings.toString(), 1, r.count("leaked-replica"));
    assertTrue(r.findings.toString(), r.consistent());
    assertFalse(Files.exists(r0));
    Invariants.check(bed, 2);
  }

  private static void awaitQuietly(CountDownLatch l) {
    try {
      l.await();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
