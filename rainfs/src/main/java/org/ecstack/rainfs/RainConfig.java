package org.ecstack.rainfs;

import java.io.IOException;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;

/**
 * The RainFS configuration file (seed §2.6.3.1): the managing NAS's namespace directory, the NAS mounts in
 * round-robin order, the replication factor and bucketPower. RainFS reads it upon every call, so NAS systems
 * can be added or removed without a restart.
 *
 * <pre>
 * namespace = /mnt/nas0/rainfs          # on the managing NAS: the visible namespace (symlinks, metadata, locks)
 * nas = /mnt/nas0, /mnt/nas1, /mnt/nas2  # NAS mounts; replica i of a file goes to NAS (nasStart + i) mod nasCount
 * replication = 2                       # default replication factor (Hadoop's create() may ask for another)
 * bucketPower = 4                       # 2^bucketPower hidden bucket folders per NAS
 * checkerTimeoutSeconds = 600           # fsck touches partial operations only when older than this
 * nasTimeoutMillis = 30000              # a NAS call (open, read, stat, write) longer than this is abandoned:
 *                                       # reads fail over, writes fail; 0 = wait forever ({@link NasGuard})
 * </pre>
 */
public final class RainConfig {
  /** Hidden folder under each NAS mount that holds the buckets of replicas. */
  public static final String DATA_DIR = ".rainfs";

  public final Path source;
  public final Path namespace;
  public final List<Path> nas;
  public final int replication;
  public final int bucketPower;
  public final long checkerTimeoutSeconds;
  /** How long a client waits for one NAS call before it gives the mount up as hung (0: forever). */
  public final long nasTimeoutMillis;

  /** Default of {@code nasTimeoutMillis}: well above a busy NAS's slowest answer, well below a task timeout. */
  public static final int DEFAULT_NAS_TIMEOUT_MILLIS = 30_000;

  private RainConfig(Path source, Path namespace, List<Path> nas, int replication, int bucketPower,
      long checkerTimeoutSeconds, long nasTimeoutMillis) {
    this.source = source;
    this.namespace = namespace;
    this.nas = Collections.unmodifiableList(nas);
    this.replication = replication;
    this.bucketPower = bucketPower;
    this.checkerTimeoutSeconds = checkerTimeoutSeconds;
    this.nasTimeoutMillis = nasTimeoutMillis;
  }

  public int nasCount() {
    return nas.size();
  }

  /** Read and validate the configuration file; every RainFS call does this (seed §2.6.3.1). */
  public static RainConfig load(Path file) throws IOException {
    Properties p = new Properties();
    try (Reader r = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
      p.load(r);
    } catch (IOException e) {
      throw new IOException("rainfs: cannot read configuration " + file + ": " + e, e);
    }
    String ns = need(p, file, "namespace");
    List<Path> nas = new ArrayList<>();
    for (String s : need(p, file, "nas").split(",")) {
      if (!s.isBlank()) {
        nas.add(Paths.get(s.trim()).toAbsolutePath().normalize());
      }
    }
    if (nas.isEmpty()) {
      throw new IOException("rainfs: " + file + ": 'nas' lists no NAS mount");
    }
    if (nas.stream().distinct().count() != nas.size()) {
      throw new IOException("rainfs: " + file + ": 'nas' lists a mount twice");
    }
    int replication = intValue(p, file, "replication", 1, 1, 64);
    int bucketPower = intValue(p, file, "bucketPower", 4, 0, 16);
    long timeout = intValue(p, file, "checkerTimeoutSeconds", 600, 0, Integer.MAX_VALUE);
    long nasTimeout = intValue(p, file, "nasTimeoutMillis", DEFAULT_NAS_TIMEOUT_MILLIS, 0, Integer.MAX_VALUE);
    return new RainConfig(file, Paths.get(ns.trim()).toAbsolutePath().normalize(), nas, replication,
        bucketPower, timeout, nasTimeout);
  }

  private static String need(Properties p, Path file, String key) throws IOException {
    String v = p.getProperty(key);
    if (v == null || v.isBlank()) {
      throw new IOException("rainfs: " + file + ": missing '" + key + "'");
    }
    return v;
  }

  private static int intValue(Properties p, Path file, String key, int dflt, int min, int max)
      throws IOException {
    String v = p.getProperty(key);
    if (v == null || v.isBlank()) {
      return dflt;
    }
    try {
      int n = Integer.parseInt(v.trim());
      if (n < min || n > max) {
        throw new IOException("rainfs: " + file + ": '" + key + "' = " + n + " is outside " + min + ".." + max);
      }
      return n;
    } catch (NumberFormatException e) {
      throw new IOException("rainfs: " + file + ": '" + key + "' is not a number: " + v);
    }
  }
}
