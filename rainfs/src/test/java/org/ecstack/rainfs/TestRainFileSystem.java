package org.ecstack.rainfs;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.IOException;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.IOUtils;
import org.junit.After;
import org.junit.Test;

/** RainFS's own behaviour beyond the contract: placement, replication, failover, failures, concurrency. */
public class TestRainFileSystem {
  @After
  public void clearHooks() {
    ReplicatingOutputStream.failWrite = null;
    RainFileSystem.crashPoint = null;
  }

  static byte[] data(long seed, int n) {
    byte[] b = new byte[n];
    new Random(seed).nextBytes(b);
    return b;
  }

  static void write(FileSystem fs, Path p, byte[] b) throws IOException {
    try (FSDataOutputStream out = fs.create(p, true)) {
      out.write(b);
    }
  }

  static byte[] read(FileSystem fs, Path p) throws IOException {
    FileStatus st = fs.getFileStatus(p);
    byte[] b = new byte[(int) st.getLen()];
    try (FSDataInputStream in = fs.open(p)) {
      IOUtils.readFully(in, b, 0, b.length);
      assertEquals("bytes past the length of " + p, -1, in.read());
    }
    return b;
  }

  /** Algorithm 1: first NAS = rndID mod nasCount, bucket = rndID mod 2^bucketPower, then round-robin. */
  @Test
  public void placementFollowsAlgorithm1() throws Exception {
    RainTestbed bed = new RainTestbed("placement", 3, 2, 3);
    FileSystem fs = bed.fs();
    int[] firstNas = new int[3];
    for (int i = 0; i < 60; i++) {
      byte[] b = data(i, 1000 + 37 * i);
      Path p = new Path("/d/f" + i);
      write(fs, p, b);
      java.nio.file.Path entry = bed.namespace.resolve("d/f" + i);
      Metadata m = Metadata.read(entry);
      assertTrue(m.closed);
      assertEquals(2, m.replicas.size());
      long rndId = Long.parseUnsignedLong(m.replicas.get(0).getFileName().toString(), 16);
      int nasStart = (int) Math.floorMod(rndId, 3L);
      long bucket = Math.floorMod(rndId, 8L);
      firstNas[nasStart]++;
      for (int r = 0; r < 2; r++) {
        assertEquals(Layout.replica(bed.nas.get((nasStart + r) % 3), bucket, rndId), m.replicas.get(r));
        assertArrayEquals(b, Files.readAllBytes(m.replicas.get(r)));
      }
      assertEquals(m.replicas.get(0), Files.readSymbolicLink(entry));
      assertEquals(b.length, m.length);
      assertArrayEquals(b, read(fs, p));
      assertEquals(2, fs.getFileStatus(p).getReplication());
    }
    for (int n : firstNas) {
      assertTrue("first replicas spread over all NAS: " + java.util.Arrays.toString(firstNas), n > 5);
    }
    // Listings show only the files, never the hidden metadata and lock files.
    assertEquals(60, fs.listStatus(new Path("/d")).length);
    Invariants.check(bed, 2);
  }

  @Test
  public void replicationIsCappedAtNasCountAndReadFromConfigOnEveryCall() throws Exception {
    RainTestbed bed = new RainTestbed("config", 2, 2, 2);
    FileSystem fs = bed.fs();
    try (FSDataOutputStream out = fs.create(new Path("/a"), true, 4096, (short) 5, 1 << 20)) {
      out.write(1);
    }
    assertEquals(2, Metadata.read(bed.namespace.resolve("a")).replicas.size());
    // Add a third NAS and raise the factor: the running FileSystem sees both on its next call.
    java.nio.file.Path nas2 = bed.root.resolve("nas2");
    Files.createDirectories(nas2);
    List<java.nio.file.Path> three = new ArrayList<>(bed.nas);
    three.add(nas2);
    bed.writeConfig(three, 3, 2, 0);
    assertEquals(3, fs.getDefaultReplication(new Path("/")));
    write(fs, new Path("/b"), data(1, 10));
    Metadata m = Metadata.read(bed.namespace.resolve("b"));
    assertEquals(3, m.replicas.size());
    assertTrue(m.replicas.stream().anyMatch(r -> r.startsWith(nas2)));
  }

  @Test
  public void readsFailOverWhenReplicaZerosNasIsEmptied() throws Exception {
    RainTestbed bed = new RainTestbed("failover", 3, 2, 2);
    FileSystem fs = bed.fs();
    byte[] b = data(7, 3 << 20);
    write(fs, new Path("/big"), b);
    java.nio.file.Path r0 = Metadata.read(bed.namespace.resolve("big")).replicas.get(0);
    Files.delete(r0);
    try (FSDataInputStream in = fs.open(new Path("/big"))) {
      byte[] got = new byte[b.length];
      IOUtils.readFully(in, got, 0, got.length);
      assertArrayEquals(b, got);
    }
    assertEquals(b.length, fs.getFileStatus(new Path("/big")).getLen());
    // Failing over in the middle of a stream: open on replica 0, lose it, keep reading.
    write(fs, new Path("/mid"), b);
    java.nio.file.Path m0 = Metadata.read(bed.namespace.resolve("mid")).replicas.get(0);
    try (FSDataInputStream in = fs.open(new Path("/mid"))) {
      byte[] got = new byte[b.length];
      IOUtils.readFully(in, got, 0, 1 << 20);
      assertTrue(in.seekToNewSource(in.getPos()));
      Files.delete(m0);
      IOUtils.readFully(in, got, 1 << 20, b.length - (1 << 20));
      assertArrayEquals(b, got);
    }
  }

  @Test
  public void createFailsCleanlyWhenANasIsUnavailable() throws Exception {
    RainTestbed bed = new RainTestbed("unavailable", 2, 2, 2);
    FileSystem fs = bed.fs();
    Files.delete(bed.nas.get(1)); // the mount point is gone
    try {
      write(fs, new Path("/x"), data(1, 100));
      fail("create with a NAS missing must fail");
    } catch (IOException expected) {
      assertTrue(expected.getMessage(), expected.getMessage().contains("unavailable"));
    }
    assertFalse(fs.exists(new Path("/x")));
    assertFalse("a missing mount point is never created", Files.exists(bed.nas.get(1)));
    Files.createDirectories(bed.nas.get(1));
    Invariants.check(bed, 2); // nothing left behind: no metadata, no replica
  }

  @Test
  public void writeFailsCleanlyWhenAReplicaFailsAndFsckCompletesIt() throws Exception {
    RainTestbed bed = new RainTestbed("writefail", 3, 2, 2);
    FileSystem fs = bed.fs();
    byte[] b = data(3, 3 << 20);
    FSDataOutputStream out = fs.create(new Path("/w"), true);
    java.nio.file.Path r1 = Metadata.read(bed.namespace.resolve("w")).replicas.get(1);
    out.write(b, 0, 2 << 20); // two buffers reach both replicas
    out.hflush();
    ReplicatingOutputStream.failWrite = r1::equals;
    try {
      out.write(b, 2 << 20, 1 << 20);
      out.close();
      fail("the write must fail when a replica fails");
    } catch (IOException expected) {
      assertTrue(expected.getMessage(), expected.getMessage().contains(r1.toString()));
    }
    ReplicatingOutputStream.failWrite = null;
    assertFalse("metadata stays open after a failed write", Metadata.read(bed.namespace.resolve("w")).closed);
    RainFsck.Report r = new RainFsck(RainConfig.load(bed.configFile), false, true, 0).run();
    assertEquals(r.findings.toString(), 1, r.count("partial-write"));
    assertTrue(r.consistent());
    Invariants.check(bed, 2);
    byte[] got = read(fs, new Path("/w"));
    // Replica 0 took the last buffer before replica 1 failed: the longest content survives, and the
    // failed replica is replaced by a copy of it.
    assertEquals(b.length, got.length);
    assertArrayEquals(b, got);
  }

  /** Many threads creating, renaming and deleting in one directory: no deadlock, nothing lost or leaked. */
  @Test
  public void concurrentCreateRenameDeleteInOneDirectory() throws Exception {
    RainTestbed bed = new RainTestbed("concurrent", 3, 2, 1);
    FileSystem fs = bed.fs();
    fs.mkdirs(new Path("/c"));
    int threads = 8;
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    List<Future<int[]>> results = new ArrayList<>();
    for (int t = 0; t < threads; t++) {
      final int seed = t;
      results.add(pool.submit(() -> {
        Random rnd = new Random(seed);
        int[] done = new int[3];
        for (int i = 0; i < 60; i++) {
          Path a = new Path("/c/n" + rnd.nextInt(6));
          Path b = new Path("/c/n" + rnd.nextInt(6));
          switch (rnd.nextInt(3)) {
            case 0 -> {
              write(fs, a, (a.getName() + ":" + seed + ":" + i).getBytes());
              done[0]++;
            }
            case 1 -> done[1] += fs.rename(a, b) ? 1 : 0;
            default -> done[2] += fs.delete(a, false) ? 1 : 0;
          }
        }
        return done;
      }));
    }
    pool.shutdown();
    assertTrue("deadlock: threads still running after 120 s", pool.awaitTermination(120, TimeUnit.SECONDS));
    int[] total = new int[3];
    for (Future<int[]> f : results) {
      int[] d = f.get();
      for (int i = 0; i < 3; i++) {
        total[i] += d[i];
      }
    }
    assertTrue("every kind of operation ran: " + java.util.Arrays.toString(total),
        total[0] > 0 && total[1] > 0 && total[2] > 0);
    settle(bed);
    Invariants.check(bed, 2);
    Set<String> names = new HashSet<>();
    for (FileStatus st : fs.listStatus(new Path("/c"))) {
      String s = new String(read(fs, st.getPath()));
      assertTrue(s, s.matches("n[0-5]:[0-7]:[0-9]+"));
      names.add(st.getPath().getName());
    }
    assertEquals(names.size(), fs.listStatus(new Path("/c")).length);
  }

  /** Hadoop's own shell (the code behind `hadoop fs`), unmodified, against rainfs://. */
  @Test
  public void hadoopFsShellWorksOnRainfs() throws Exception {
    RainTestbed bed = new RainTestbed("fsshell", 3, 2, 2);
    java.nio.file.Path local = bed.root.resolve("local.bin");
    byte[] b = data(21, 300_000);
    Files.write(local, b);
    org.apache.hadoop.conf.Configuration conf = bed.conf();
    String[][] commands = {
        {"-mkdir", "-p", "rainfs:///shell/in"},
        {"-put", local.toString(), "rainfs:///shell/in/a.bin"},
        {"-cp", "rainfs:///shell/in/a.bin", "rainfs:///shell/in/b.bin"},
        {"-mv", "rainfs:///shell/in", "rainfs:///shell/out"},
        {"-ls", "-R", "rainfs:///shell"},
        {"-test", "-f", "rainfs:///shell/out/b.bin"},
        {"-rm", "rainfs:///shell/out/a.bin"},
        {"-get", "rainfs:///shell/out/b.bin", bed.root.resolve("back.bin").toString()},
    };
    for (String[] cmd : commands) {
      assertEquals(String.join(" ", cmd), 0,
          org.apache.hadoop.util.ToolRunner.run(conf, new org.apache.hadoop.fs.FsShell(), cmd));
    }
    assertArrayEquals(b, Files.readAllBytes(bed.root.resolve("back.bin")));
    FileSystem fs = bed.fs();
    assertFalse(fs.exists(new Path("/shell/out/a.bin")));
    assertArrayEquals(b, read(fs, new Path("/shell/out/b.bin")));
    Invariants.check(bed, 2);
  }

  /**
   * After concurrent work: a file renamed between its create and its close keeps open metadata (its writer's
   * close no longer finds it), which fsck closes; that is the only finding allowed.
   */
  private static void settle(RainTestbed bed) throws IOException {
    RainFsck.Report r = new RainFsck(RainConfig.load(bed.configFile), false, true, 0).run();
    for (RainFsck.Finding f : r.findings) {
      assertEquals(r.findings.toString(), "partial-write", f.kind);
    }
    assertTrue(r.consistent());
  }

  /** Client processes (separate JVMs) share one namespace: only the NAS file locks keep them apart. */
  @Test
  public void clientProcessesShareOneNamespaceUnderNasLocks() throws Exception {
    RainTestbed bed = new RainTestbed("processes", 3, 2, 1);
    bed.fs().mkdirs(new Path("/p"));
    String javaBin = java.nio.file.Paths.get(System.getProperty("java.home"), "bin", "java").toString();
    List<Process> procs = new ArrayList<>();
    for (int i = 0; i < 3; i++) {
      procs.add(new ProcessBuilder(javaBin, "-cp", System.getProperty("java.class.path"),
          LockStress.class.getName(), bed.configFile.toString(), Integer.toString(i), "80")
          .redirectErrorStream(true).start());
    }
    for (Process p : procs) {
      assertTrue("a client process hung (deadlock?)", p.waitFor(180, TimeUnit.SECONDS));
      String out = new String(p.getInputStream().readAllBytes());
      assertEquals(out, 0, p.exitValue());
      assertTrue(out, out.contains("done "));
    }
    settle(bed);
    Invariants.check(bed, 2);
    FileSystem fs = bed.fs();
    for (FileStatus st : fs.listStatus(new Path("/p"))) {
      String s = new String(read(fs, st.getPath()));
      assertTrue(s, s.matches("n[0-3]:[0-2]:[0-9]+"));
    }
  }

  /** setPermission, setOwner and setTimes reach every replica; the block location covers the file. */
  @Test
  public void attributesApplyToEveryReplicaAndBlockLocationsCoverTheFile() throws Exception {
    RainTestbed bed = new RainTestbed("attributes", 3, 3, 2);
    org.apache.hadoop.conf.Configuration conf = bed.conf();
    conf.setLong(RainFileSystem.BLOCK_SIZE_KEY, 1 << 20);
    FileSystem fs = FileSystem.newInstance(java.net.URI.create("rainfs:///"), conf);
    Path p = new Path("/attr/f");
    byte[] b = data(5, (5 << 20) / 2);
    write(fs, p, b);
    List<java.nio.file.Path> replicas = Metadata.read(bed.namespace.resolve("attr/f")).replicas;
    assertEquals(3, replicas.size());

    fs.setPermission(p, new org.apache.hadoop.fs.permission.FsPermission((short) 0640));
    java.nio.file.attribute.PosixFileAttributes mine =
        Files.readAttributes(replicas.get(0), java.nio.file.attribute.PosixFileAttributes.class);
    fs.setOwner(p, mine.owner().getName(), mine.group().getName());
    long mtime = 1_700_000_000_000L;
    fs.setTimes(p, mtime, -1);
    for (java.nio.file.Path r : replicas) {
      assertEquals(r.toString(), "rw-r-----",
          java.nio.file.attribute.PosixFilePermissions.toString(Files.getPosixFilePermissions(r)));
      assertEquals(r.toString(), mtime, Files.getLastModifiedTime(r).toMillis());
    }
    FileStatus st = fs.getFileStatus(p);
    assertEquals((short) 0640, st.getPermission().toShort());
    assertEquals(mine.owner().getName(), st.getOwner());
    assertEquals(mtime, st.getModificationTime());
    assertEquals(3, st.getReplication());

    // Hadoop's default, as for RawLocalFileSystem: one location, localhost, covering the whole file (every
    // client is equally close to every NAS, seed §2.5); splits still follow the block size in FileStatus.
    org.apache.hadoop.fs.BlockLocation[] blocks = fs.getFileBlockLocations(st, 0, st.getLen());
    assertEquals(1, blocks.length);
    assertEquals(0, blocks[0].getOffset());
    assertEquals(st.getLen(), blocks[0].getLength());
    assertEquals("localhost", blocks[0].getHosts()[0]);
    assertEquals(1 << 20, st.getBlockSize());
    // A directory's attributes are the directory's own.
    fs.setPermission(new Path("/attr"), new org.apache.hadoop.fs.permission.FsPermission((short) 0750));
    assertEquals((short) 0750, fs.getFileStatus(new Path("/attr")).getPermission().toShort());
    assertArrayEquals(b, read(fs, p));
    Invariants.check(bed, 3);
  }

  @Test
  public void plainFilesFromPosixApplicationsReadMoveAndDelete() throws Exception {
    RainTestbed bed = new RainTestbed("plain", 2, 2, 2);
    FileSystem fs = bed.fs();
    Files.createDirectories(bed.namespace);
    Files.write(bed.namespace.resolve("posix.txt"), "from MPI".getBytes());
    assertEquals("from MPI", new String(read(fs, new Path("/posix.txt"))));
    assertTrue(fs.rename(new Path("/posix.txt"), new Path("/moved.txt")));
    assertTrue(fs.delete(new Path("/moved.txt"), false));
    assertFalse(Files.exists(bed.namespace.resolve("moved.txt")));
    try {
      fs.create(new Path("/.x" + Layout.META_SUFFIX));
      fail("reserved names are refused");
    } catch (IOException expected) {
      // refused
    }
  }
}
