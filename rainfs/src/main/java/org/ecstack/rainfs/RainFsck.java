package org.ecstack.rainfs;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.FileTime;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ThreadLocalRandom;
import java.util.zip.CRC32C;
import org.ecstack.rainfs.Namespace.Kind;

/**
 * The RainFS checker (seed §2.6.4): scans the namespace on the managing NAS and the hidden bucket folders on
 * every NAS, and after {@code checkerTimeoutSeconds} completes or rolls back partial creates, deletes and moves
 * and removes leaked replicas. Beyond the seed it also checks every replica of every file (present, length,
 * CRC-32C) and re-replicates files below their replication factor onto other NAS systems.
 *
 * <p>What each state of an interrupted Algorithm 1–3 looks like, and what the checker does:
 * <ul>
 *   <li>replicas, no metadata (create stopped before line 10): leaked replicas, deleted;</li>
 *   <li>metadata, no symlink (create before line 11; delete after line 4; move between 9 and 10 at the target,
 *       or between 10 and 11 at the source): orphan metadata. Its replicas that no complete file references are
 *       deleted, then the metadata: the create is rolled back, the delete finished, and the move rolled back
 *       (between 9 and 10) or finished (between 10 and 11);</li>
 *   <li>metadata {@code open} and no writer holding the lock (a write that failed or a writer that died):
 *       partial write; the longest replicas that agree become the file, the rest are replaced.</li>
 * </ul>
 * Nothing younger than the timeout, and no file whose lock someone holds, is touched.
 *
 * <p>A NAS that hangs instead of failing (a hard-mounted NFS) does not hang the checker: replica checks,
 * replica deletes and the probes of NAS systems run under {@link NasGuard} with {@code nasTimeoutMillis}. A NAS
 * that times out is reported once ({@code hung-nas}, unresolved: exit status 1) and counts as unavailable for the
 * rest of the run, like a failed NAS: its replicas are missing, files are re-replicated elsewhere, and its
 * buckets are not swept. When it answers again, the next run sweeps its replicas that no file lists any more.
 * A NAS that hangs in the middle of a copy onto it still blocks the run.
 */
public final class RainFsck {
  /** One problem found, and what the checker did about it. */
  public static final class Finding {
    public final String kind;
    public final String path;
    public final String detail;
    public final String action;

    Finding(String kind, String path, String detail, String action) {
      this.kind = kind;
      this.path = path;
      this.detail = detail;
      this.action = action;
    }

    @Override
    public String toString() {
      return kind + " " + path + ": " + detail + " -> " + action;
    }
  }

  /** What a run found. */
  public static final class Report {
    public final List<Finding> findings = new ArrayList<>();
    public long files;
    public long replicasChecked;
    public long unresolved;

    public boolean consistent() {
      return unresolved == 0;
    }

    public long count(String kind) {
      return findings.stream().filter(f -> f.kind.equals(kind)).count();
    }
  }

  private final RainConfig config;
  private final boolean dryRun;
  private final boolean verifyCrc;
  private final long timeoutMillis;
  private final long nowMillis;
  private final Report report = new Report();
  /** Replicas referenced by metadata that stays (complete files, and orphans too young to touch). */
  private final Set<Path> referenced = new HashSet<>();
  private final List<Path> complete = new ArrayList<>();
  private final List<Path> orphans = new ArrayList<>();
  /** NAS mounts that timed out during this run (reported once each, at the end). */
  private final Set<Path> hungNas = new java.util.LinkedHashSet<>();

  public RainFsck(RainConfig config, boolean dryRun, boolean verifyCrc, long timeoutSeconds) {
    this.config = config;
    this.dryRun = dryRun;
    this.verifyCrc = verifyCrc;
    this.timeoutMillis = timeoutSeconds * 1000;
    this.nowMillis = System.currentTimeMillis();
  }

  public Report run() throws IOException {
    if (!Files.isDirectory(config.namespace)) {
      throw new IOException("rainfs fsck: the managing NAS's namespace " + config.namespace + " is unavailable");
    }
    scan(config.namespace);
    for (Path entry : complete) {
      try {
        Metadata m = Metadata.read(entry);
        if (m != null) {
          referenced.addAll(m.replicas);
        }
      } catch (Metadata.CorruptMetadataException e) {
        // handled in checkFile
      }
    }
    for (Path meta : orphans) {
      orphan(meta);
    }
    for (Path entry : complete) {
      checkFile(entry);
    }
    sweepBuckets();
    for (Path nas : hungNas) {
      found("hung-nas", nas, "a call did not return within " + config.nasTimeoutMillis + " ms (nasTimeoutMillis)",
          "treat it as unavailable for this run (its replicas count as missing; its buckets are not swept)",
          false);
    }
    return report;
  }

  /**
   * Run a call on the NAS holding {@code file} under its guard; false (and the NAS noted as hung) when the NAS
   * does not answer in time or is suspect already.
   */
  private <T> T guarded(Path file, String what, NasGuard.Op<T> op) throws IOException {
    NasGuard g = NasGuard.of(file);
    try {
      return g.call(what + " " + file, config.nasTimeoutMillis, op);
    } catch (NasGuard.NasTimeoutException | NasGuard.SuspectNasException e) {
      hungNas.add(g.nas);
      throw e;
    }
  }

  /** Whether the NAS mounted at {@code nas} is there and answers (a missing or hung one is unavailable). */
  private boolean available(Path nas) {
    try {
      return NasGuard.ofMount(nas).call("probe " + nas, config.nasTimeoutMillis, () -> Files.isDirectory(nas));
    } catch (IOException e) {
      if (NasGuard.ofMount(nas).isSuspect()) {
        hungNas.add(nas);
      }
      return false;
    }
  }

  private String rel(Path local) {
    return "/" + config.namespace.relativize(local);
  }

  private boolean old(Path p) {
    try {
      FileTime t = Files.getLastModifiedTime(p, LinkOption.NOFOLLOW_LINKS);
      return nowMillis - t.toMillis() >= timeoutMillis;
    } catch (IOException e) {
      return false;
    }
  }

  private void found(String kind, Path where, String detail, String action, boolean resolved) {
    report.findings.add(new Finding(kind, where.startsWith(config.namespace) ? rel(where) : where.toString(),
        detail, dryRun ? "none (dry run): would " + action : action));
    if (dryRun || !resolved) {
      report.unresolved++;
    }
  }

  // ---- pass 1: the namespace --------------------------------------------------------------------------------

  private void scan(Path dir) throws IOException {
    List<Path> children = new ArrayList<>();
    try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir)) {
      ds.forEach(children::add);
    }
    for (Path child : children) {
      String name = child.getFileName().toString();
      if (name.equals(RainConfig.DATA_DIR)) {
        continue; // the managing NAS is also a data NAS
      }
      String entryName = Layout.entryOfMeta(name);
      if (entryName != null) {
        if (!Files.exists(child.resolveSibling(entryName), LinkOption.NOFOLLOW_LINKS)) {
          orphans.add(child);
        }
        continue;
      }
      if (name.startsWith(".") && name.endsWith(Layout.TMP_SUFFIX)) {
        if (old(child)) {
          found("stale-temporary", child, "left by an interrupted metadata write", "delete it", true);
          if (!dryRun) {
            Files.deleteIfExists(child);
          }
        }
        continue;
      }
      if (Layout.isReserved(name)) {
        continue; // lock files stay (see PathLocks)
      }
      Kind k = Namespace.classify(child);
      if (k == Kind.DIR && !Files.isSymbolicLink(child)) {
        scan(child);
      } else if (k == Kind.RAIN_FILE) {
        report.files++;
        complete.add(child);
      } else if (k == Kind.PLAIN_FILE && Files.isSymbolicLink(child)) {
        adoptIfReplica(child);
      } else if (k == Kind.PLAIN_FILE) {
        report.files++;
      }
    }
  }

  /** A symlink into a bucket folder without metadata (its metadata was lost): rebuild the metadata. */
  private void adoptIfReplica(Path link) throws IOException {
    Path target = Files.readSymbolicLink(link);
    if (!target.isAbsolute() || !isBucketFile(target)) {
      report.files++;
      return; // a user's own symlink
    }
    report.files++;
    if (!old(link) || PathLocks.isHeld(link)) {
      return;
    }
    if (!Files.isRegularFile(target)) {
      found("lost", link, "symlink to missing replica " + target + " and no metadata", "nothing (no copy left)",
          false);
      return;
    }
    found("missing-metadata", link, "symlink to " + target + " without metadata", "rebuild the metadata", true);
    if (!dryRun) {
      try (PathLocks.Held l = PathLocks.lock(link)) {
        Metadata.open(config.replication, List.of(target)).write(link);
      }
      referenced.add(target);
      complete.add(link);
    }
  }

  private boolean isBucketFile(Path p) {
    Path bucket = p.getParent();
    return bucket != null && bucket.getParent() != null
        && bucket.getParent().getFileName() != null
        && bucket.getParent().getFileName().toString().equals(RainConfig.DATA_DIR);
  }

  // ---- pass 2: orphan metadata (partial create, delete, move) -----------------------------------------------

  private void orphan(Path metaFile) throws IOException {
    String entryName = Layout.entryOfMeta(metaFile.getFileName().toString());
    Path entry = metaFile.resolveSibling(entryName);
    Metadata m;
    try {
      m = Metadata.decode(Files.readString(metaFile, StandardCharsets.UTF_8));
    } catch (IOException e) {
      m = null;
    }
    if (!old(metaFile) || PathLocks.isHeld(entry)) {
      if (m != null) {
        referenced.addAll(m.replicas); // in progress: keep its replicas out of the leak sweep
      }
      return;
    }
    if (m == null) {
      found("corrupt-metadata", metaFile, "orphan metadata that fails its checks",
          "delete it (its replicas are swept as leaked)", true);
      if (!dryRun) {
        Files.deleteIfExists(metaFile);
      }
      return;
    }
    try (PathLocks.Held l = dryRun ? null : PathLocks.lock(entry)) {
      if (!dryRun && Files.exists(entry, LinkOption.NOFOLLOW_LINKS)) {
        referenced.addAll(m.replicas);
        return; // completed meanwhile
      }
      int shared = 0;
      int deleted = 0;
      for (Path r : m.replicas) {
        if (referenced.contains(r)) {
          shared++;
        } else if (!dryRun && deleteReplica(r)) {
          deleted++;
        }
      }
      String what = shared > 0
          ? "move interrupted (its replicas belong to " + shared + " complete entry): drop this metadata"
          : "create or delete interrupted: delete its " + m.replicas.size() + " replicas and the metadata";
      found("partial-operation", entry, "metadata without symlink", what, true);
      if (!dryRun) {
        Files.deleteIfExists(metaFile);
      }
    }
  }

  // ---- pass 3: every replica of every file ------------------------------------------------------------------

  private static final class ReplicaState {
    final Path path;
    final long length;
    final long crc;

    ReplicaState(Path path, long length, long crc) {
      this.path = path;
      this.length = length;
      this.crc = crc;
    }
  }

  /** Delete a replica if its NAS answers (a hung NAS keeps it: the next run sweeps it as leaked). */
  private boolean deleteReplica(Path r) {
    try {
      return guarded(r, "delete", () -> Files.deleteIfExists(r));
    } catch (IOException e) {
      return false;
    }
  }

  private ReplicaState inspect(Path replica, boolean wantCrc) {
    try {
      long size = guarded(replica, "stat", () -> Files.isRegularFile(replica) ? Files.size(replica) : -1L);
      if (size < 0) {
        return null;
      }
      long len = size;
      long crc = -1;
      if (wantCrc) {
        CRC32C c = new CRC32C();
        byte[] b = new byte[1 << 20];
        long n = 0;
        // Every open and read under the NAS's guard: a hung NAS times out. (No Hadoop stream here: fsck runs
        // with no Hadoop jar.)
        NasGuard g = NasGuard.of(replica);
        long t = config.nasTimeoutMillis;
        FileChannel ch = g.call("open " + replica, t, () -> FileChannel.open(replica, StandardOpenOption.READ),
            opened -> {
              if (opened != null) {
                opened.close();
              }
            });
        boolean abandoned = false;
        try {
          while (true) {
            final byte[] into = b;
            final long at = n;
            int k;
            try {
              k = g.call("read " + replica, t, () -> ch.read(ByteBuffer.wrap(into), at), ignored -> ch.close());
            } catch (NasGuard.NasTimeoutException e) {
              abandoned = true; // the abandoned read closes the channel when it returns
              throw e;
            }
            if (k <= 0) {
              break;
            }
            c.update(b, 0, k);
            n += k;
          }
        } finally {
          if (!abandoned) {
            g.release(ch, t);
          }
        }
        len = n;
        crc = c.getValue();
      }
      report.replicasChecked++;
      return new ReplicaState(replica, len, crc);
    } catch (IOException e) {
      if (NasGuard.of(replica).isSuspect()) {
        hungNas.add(NasGuard.of(replica).nas);
      }
      return null; // its NAS is unavailable
    }
  }

  private void checkFile(Path entry) throws IOException {
    Metadata m;
    try {
      m = Metadata.read(entry);
    } catch (Metadata.CorruptMetadataException e) {
      Path target = Files.readSymbolicLink(entry);
      found("corrupt-metadata", entry, e.getMessage(), "rebuild it from the symlink's target " + target, true);
      if (!dryRun) {
        try (PathLocks.Held l = PathLocks.lock(entry)) {
          Metadata.open(config.replication, List.of(target)).write(entry);
        }
        checkFile(entry);
      }
      return;
    }
    if (m == null || PathLocks.isHeld(entry)) {
      return; // deleted meanwhile, or in use
    }
    if (!m.closed && !old(Layout.metaFile(entry))) {
      return; // a writer may still have it open
    }
    boolean partialWrite = !m.closed;
    List<ReplicaState> states = new ArrayList<>();
    List<Path> missing = new ArrayList<>();
    for (Path r : m.replicas) {
      ReplicaState s = inspect(r, verifyCrc || partialWrite);
      if (s == null) {
        missing.add(r);
      } else {
        states.add(s);
      }
    }
    long length = m.length;
    long crc = m.crc32c;
    if (partialWrite && !states.isEmpty()) {
      // The writer stopped: the longest content that replicas agree on is the file.
      Map<String, List<ReplicaState>> groups = new LinkedHashMap<>();
      for (ReplicaState s : states) {
        groups.computeIfAbsent(s.length + ":" + s.crc, k -> new ArrayList<>()).add(s);
      }
      List<ReplicaState> best = null;
      for (List<ReplicaState> g : groups.values()) {
        if (best == null || g.get(0).length > best.get(0).length
            || (g.get(0).length == best.get(0).length && g.size() > best.size())) {
          best = g;
        }
      }
      length = best.get(0).length;
      crc = best.get(0).crc;
    }
    List<Path> good = new ArrayList<>();
    List<Path> corrupt = new ArrayList<>();
    for (ReplicaState s : states) {
      boolean ok = s.length == length && (s.crc < 0 || s.crc == crc);
      (ok ? good : corrupt).add(s.path);
    }
    int want = Math.max(1, Math.min(m.replication, config.nasCount()));
    boolean changed = partialWrite || !corrupt.isEmpty() || !missing.isEmpty() || good.size() < want;
    if (!changed) {
      return;
    }
    String detail = good.size() + " good of " + m.replicas.size() + " listed (factor " + m.replication + ")"
        + (missing.isEmpty() ? "" : ", missing " + missing)
        + (corrupt.isEmpty() ? "" : ", corrupt " + corrupt);
    if (good.isEmpty()) {
      found("lost", entry, detail, "nothing (no good replica left)", false);
      return;
    }
    String kind = partialWrite ? "partial-write" : !corrupt.isEmpty() ? "corrupt-replica"
        : good.size() < want ? "under-replicated" : "missing-replica";
    if (dryRun) {
      found(kind, entry, detail, "repair to " + want + " replicas", true);
      return;
    }
    try (PathLocks.Held l = PathLocks.lock(entry)) {
      Metadata now = Metadata.read(entry);
      if (now == null || !now.replicas.equals(m.replicas) || now.closed != m.closed) {
        return; // changed since we looked; the next run sees it
      }
      List<Path> result = repair(entry, good, corrupt, want);
      referenced.addAll(result); // the new copies are no leak
      new Metadata(m.replication, true, length, crc, result).write(entry);
      boolean full = result.size() >= want;
      found(kind, entry, detail, full ? "repaired to " + result.size() + " replicas"
          : "only " + result.size() + " of " + want + " replicas placed (too few NAS available)", full);
    }
  }

  /** Replace corrupt replicas and add copies on NAS systems holding none until there are {@code want}. */
  private List<Path> repair(Path entry, List<Path> good, List<Path> corrupt, int want) throws IOException {
    for (Path r : corrupt) {
      deleteReplica(r);
    }
    List<Path> result = new ArrayList<>(good);
    Path source = good.get(0);
    Path bucketName = source.getParent().getFileName();
    Path fileName = source.getFileName();
    int start = nasIndexOf(source);
    for (int i = 1; i <= config.nasCount() && result.size() < want; i++) {
      Path nas = config.nas.get(Math.floorMod(start + i, config.nasCount()));
      if (result.stream().anyMatch(r -> r.startsWith(nas)) || !available(nas)) {
        continue; // it holds a replica already, or it is unavailable (missing or hung)
      }
      Path target = nas.resolve(RainConfig.DATA_DIR).resolve(bucketName).resolve(fileName);
      try {
        Files.createDirectories(target.getParent());
        Path tmp = target.resolveSibling(fileName + "." + Long.toHexString(ThreadLocalRandom.current().nextLong())
            + Layout.TMP_SUFFIX);
        Files.copy(source, tmp, StandardCopyOption.COPY_ATTRIBUTES);
        try {
          Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        } catch (AtomicMoveNotSupportedException e) {
          Files.move(tmp, target, StandardCopyOption.REPLACE_EXISTING);
        }
        result.add(target);
      } catch (IOException e) {
        // that NAS failed too: try the next
      }
    }
    // Replica 0 is the symlink's target: re-point the symlink if its target is gone.
    Path target = Files.readSymbolicLink(entry);
    if (!result.get(0).equals(target)) {
      Path tmp = Layout.tmpFile(entry, ThreadLocalRandom.current().nextLong());
      Files.createSymbolicLink(tmp, result.get(0));
      Files.move(tmp, entry, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    }
    return result;
  }

  private int nasIndexOf(Path replica) {
    for (int i = 0; i < config.nasCount(); i++) {
      if (replica.startsWith(config.nas.get(i))) {
        return i;
      }
    }
    return -1;
  }

  // ---- pass 4: leaked replicas ------------------------------------------------------------------------------

  private void sweepBuckets() throws IOException {
    for (Path nas : config.nas) {
      Path data = nas.resolve(RainConfig.DATA_DIR);
      if (!available(nas) || !Files.isDirectory(data)) {
        continue; // missing or hung: its leaked replicas wait for a run in which it answers
      }
      try (DirectoryStream<Path> buckets = Files.newDirectoryStream(data)) {
        for (Path bucket : buckets) {
          if (!Files.isDirectory(bucket)) {
            continue;
          }
          try (DirectoryStream<Path> files = Files.newDirectoryStream(bucket)) {
            for (Path f : files) {
              if (referenced.contains(f) || !old(f)) {
                continue;
              }
              boolean tmp = f.getFileName().toString().endsWith(Layout.TMP_SUFFIX);
              found(tmp ? "stale-temporary" : "leaked-replica", f,
                  tmp ? "an interrupted fsck copy" : "no metadata references it", "delete it", true);
              if (!dryRun) {
                Files.deleteIfExists(f);
              }
            }
          }
        }
      }
    }
  }

  // ---- command line -----------------------------------------------------------------------------------------

  static String json(Report r, boolean dryRun) {
    StringBuilder b = new StringBuilder();
    b.append("{\"dry_run\":").append(dryRun).append(",\"files\":").append(r.files)
        .append(",\"replicas_checked\":").append(r.replicasChecked)
        .append(",\"unresolved\":").append(r.unresolved)
        .append(",\"consistent\":").append(r.consistent()).append(",\"findings\":[");
    for (int i = 0; i < r.findings.size(); i++) {
      Finding f = r.findings.get(i);
      b.append(i == 0 ? "" : ",").append("{\"kind\":").append(quote(f.kind)).append(",\"path\":")
          .append(quote(f.path)).append(",\"detail\":").append(quote(f.detail)).append(",\"action\":")
          .append(quote(f.action)).append('}');
    }
    return b.append("]}").toString();
  }

  private static String quote(String s) {
    StringBuilder b = new StringBuilder("\"");
    for (char ch : s.toCharArray()) {
      switch (ch) {
        case '"' -> b.append("\\\"");
        case '\\' -> b.append("\\\\");
        case '\n' -> b.append("\\n");
        default -> {
          if (ch < 0x20) {
            b.append(String.format("\\u%04x", (int) ch));
          } else {
            b.append(ch);
          }
        }
      }
    }
    return b.append('"').toString();
  }

  private static final String USAGE = "usage: rainfs fsck --config FILE [--dry-run] [--json] [--no-crc]"
      + " [--timeout SECONDS]\n"
      + "  exit 0: consistent; 1: problems remain (or found, with --dry-run); 2: usage or configuration error";

  public static void main(String[] args) {
    System.exit(cli(args));
  }

  static int cli(String[] args) {
    String cfg = System.getenv("RAINFS_CONFIG");
    boolean dry = false;
    boolean asJson = false;
    boolean crc = true;
    Long timeout = null;
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "fsck" -> { }
        case "--help", "-h" -> {
          System.out.println(USAGE);
          return 0;
        }
        case "--config" -> cfg = i + 1 < args.length ? args[++i] : null;
        case "--dry-run" -> dry = true;
        case "--json" -> asJson = true;
        case "--no-crc" -> crc = false;
        case "--timeout" -> {
          try {
            timeout = Long.parseLong(args[++i]);
          } catch (RuntimeException e) {
            System.err.println(USAGE);
            return 2;
          }
        }
        default -> {
          System.err.println("rainfs fsck: unknown argument " + args[i] + "\n" + USAGE);
          return 2;
        }
      }
    }
    if (cfg == null) {
      System.err.println(USAGE);
      return 2;
    }
    try {
      RainConfig c = RainConfig.load(Paths.get(cfg));
      Report r = new RainFsck(c, dry, crc, timeout != null ? timeout : c.checkerTimeoutSeconds).run();
      if (asJson) {
        System.out.println(json(r, dry));
      } else {
        for (Finding f : r.findings) {
          System.out.println(f);
        }
        System.out.printf("rainfs fsck: %d files, %d replicas checked, %d findings, %s%n", r.files,
            r.replicasChecked, r.findings.size(), r.consistent() ? "consistent" : r.unresolved + " unresolved");
      }
      return r.consistent() ? 0 : 1;
    } catch (IOException e) {
      System.err.println("rainfs fsck: " + e.getMessage());
      return 2;
    }
  }
}
