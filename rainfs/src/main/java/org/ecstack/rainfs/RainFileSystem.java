package org.ecstack.rainfs;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.nio.channels.FileChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributeView;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.FileTime;
import java.nio.file.attribute.PosixFileAttributeView;
import java.nio.file.attribute.PosixFileAttributes;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.UserPrincipalLookupService;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ThreadLocalRandom;
import java.util.zip.CRC32C;
import org.ecstack.rainfs.Namespace.Kind;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.BufferedFSInputStream;
import org.apache.hadoop.fs.CreateFlag;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.ParentNotDirectoryException;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathIsNotEmptyDirectoryException;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.util.Progressable;

/**
 * RainFS, the Replicating Array of Independent NAS File System (seed ch. 2, §2.6), as a Hadoop FileSystem for
 * the {@code rainfs://} scheme.
 *
 * <p>The namespace lives on the managing NAS ({@link RainConfig#namespace}): directories are plain
 * directories, and each file is a symlink to its replica 0 in a hidden bucket folder on some NAS, with a
 * hidden metadata file beside it listing every replica ({@link Metadata}). Files that POSIX applications put
 * in the namespace directly (regular files, symlinks without metadata) read, move and delete as plain files.
 *
 * <p>create, delete and rename of a file follow Algorithms 1, 2 and 3 line by line (see the methods
 * {@link #algorithm1Create}, {@link #algorithm2Delete}, {@link #algorithm3Move}); the remaining operations
 * act on the namespace directory much as RawLocalFileSystem does (§2.6.3). The configuration file named by
 * {@code fs.rainfs.config} is read upon every call (§2.6.3.1).
 */
public class RainFileSystem extends FileSystem {
  public static final String SCHEME = "rainfs";
  /** Hadoop configuration key naming the RainFS configuration file. */
  public static final String CONFIG_KEY = "fs.rainfs.config";
  public static final String BLOCK_SIZE_KEY = "fs.rainfs.block.size";
  private static final long DEFAULT_BLOCK_SIZE = 64L << 20;

  /** Test hook: called before each numbered line of Algorithms 1–3; a test throws to simulate a crash. */
  interface CrashPoint {
    void at(String algorithm, int line);
  }

  static volatile CrashPoint crashPoint;

  private URI uri;
  private java.nio.file.Path configFile;
  private Path workingDir;

  @Override
  public String getScheme() {
    return SCHEME;
  }

  @Override
  public void initialize(URI name, Configuration conf) throws IOException {
    super.initialize(name, conf);
    setConf(conf);
    String cfg = conf.get(CONFIG_KEY);
    if (cfg == null || cfg.isBlank()) {
      cfg = System.getenv("RAINFS_CONFIG");
    }
    if (cfg == null || cfg.isBlank()) {
      throw new IOException("rainfs: set " + CONFIG_KEY + " (or RAINFS_CONFIG) to the RainFS configuration file");
    }
    configFile = java.nio.file.Paths.get(cfg).toAbsolutePath();
    RainConfig c = RainConfig.load(configFile);
    if (!Files.isDirectory(c.namespace)) {
      java.nio.file.Path parent = c.namespace.getParent();
      if (parent == null || !Files.isDirectory(parent)) {
        throw new IOException("rainfs: the managing NAS is unavailable: " + c.namespace + " has no parent directory");
      }
      Files.createDirectories(c.namespace);
    }
    String authority = name.getAuthority();
    uri = URI.create(SCHEME + "://" + (authority == null ? "" : authority) + "/");
    workingDir = getHomeDirectory();
  }

  /** The configuration, read again upon every call (§2.6.3.1). */
  RainConfig config() throws IOException {
    return RainConfig.load(configFile);
  }

  @Override
  public URI getUri() {
    return uri;
  }

  @Override
  public String getCanonicalServiceName() {
    return null; // no delegation tokens: the NAS mounts do their own authentication
  }

  @Override
  public Path getWorkingDirectory() {
    return workingDir;
  }

  @Override
  public void setWorkingDirectory(Path dir) {
    workingDir = makeQualified(dir.isAbsolute() ? dir : new Path(workingDir, dir));
  }

  @Override
  public short getDefaultReplication() {
    try {
      return (short) config().replication;
    } catch (IOException e) {
      return 1;
    }
  }

  @Override
  public short getDefaultReplication(Path path) {
    return getDefaultReplication();
  }

  @Override
  public long getDefaultBlockSize() {
    return getConf().getLong(BLOCK_SIZE_KEY, DEFAULT_BLOCK_SIZE);
  }

  @Override
  public long getDefaultBlockSize(Path path) {
    return getDefaultBlockSize();
  }

  // ---------------------------------------------------------------------------------------------------------
  // Mapping Hadoop paths to the namespace on the managing NAS.

  /** The namespace entry (on the managing NAS) of a Hadoop path; reserved names are refused. */
  java.nio.file.Path local(RainConfig c, Path p) throws IOException {
    checkPath(p);
    Path abs = p.isAbsolute() ? p : new Path(workingDir, p);
    String s = abs.toUri().getPath();
    java.nio.file.Path out = c.namespace;
    for (String part : s.split("/")) {
      if (part.isEmpty() || part.equals(".")) {
        continue;
      }
      if (part.equals("..") || Layout.isReserved(part)) {
        throw new FileNotFoundException("rainfs: reserved or invalid path component '" + part + "' in " + p);
      }
      out = out.resolve(part);
    }
    return out;
  }

  private Path hadoopPath(RainConfig c, java.nio.file.Path local) {
    String rel = c.namespace.relativize(local).toString();
    return makeQualified(new Path("/" + rel));
  }

  private static void crash(String algorithm, int line) {
    CrashPoint c = crashPoint;
    if (c != null) {
      c.at(algorithm, line);
    }
  }

  // ---------------------------------------------------------------------------------------------------------
  // Algorithm 1: create.

  @Override
  public FSDataOutputStream create(Path f, FsPermission permission, boolean overwrite, int bufferSize,
      short replication, long blockSize, Progressable progress) throws IOException {
    RainConfig c = config();
    java.nio.file.Path local = local(c, f);
    if (local.equals(c.namespace)) {
      throw new org.apache.hadoop.fs.FileAlreadyExistsException("rainfs: cannot create the root directory " + f);
    }
    Path parent = f.getParent();
    if (parent != null && !mkdirs(parent)) {
      throw new IOException("rainfs: cannot create parent directory " + parent);
    }
    return createLocal(c, f, local, permission, overwrite, replication);
  }

  @Override
  public FSDataOutputStream createNonRecursive(Path f, FsPermission permission, EnumSet<CreateFlag> flags,
      int bufferSize, short replication, long blockSize, Progressable progress) throws IOException {
    RainConfig c = config();
    java.nio.file.Path local = local(c, f);
    Kind pk = local.getParent() == null ? Kind.MISSING : Namespace.classify(local.getParent());
    if (pk == Kind.MISSING) {
      throw new FileNotFoundException("rainfs: parent of " + f + " does not exist");
    }
    if (pk != Kind.DIR) {
      throw new ParentNotDirectoryException("rainfs: parent of " + f + " is a file");
    }
    return createLocal(c, f, local, permission, flags.contains(CreateFlag.OVERWRITE), replication);
  }

  private FSDataOutputStream createLocal(RainConfig c, Path f, java.nio.file.Path local,
      FsPermission permission, boolean overwrite, short replication) throws IOException {
    int r = Math.max(1, Math.min(replication, c.nasCount()));
    Created created;
    try (PathLocks.Held l = PathLocks.lock(local)) {
      Kind k = Namespace.classify(local);
      if (k == Kind.DIR) {
        throw new org.apache.hadoop.fs.FileAlreadyExistsException("rainfs: " + f + " is a directory");
      }
      if (k != Kind.MISSING) {
        if (!overwrite) {
          throw new org.apache.hadoop.fs.FileAlreadyExistsException("rainfs: " + f + " already exists");
        }
        deleteFileLocked(local, k);
      }
      created = algorithm1Create(c, local, r);
      FsPermission perm = permission == null ? FsPermission.getFileDefault() : permission;
      try {
        applyPermission(created.files, perm.applyUMask(FsPermission.getUMask(getConf())), c.nasTimeoutMillis);
      } catch (IOException e) {
        for (int i = 0; i < created.channels.length; i++) {
          NasGuard.of(created.files.get(i)).release(created.channels[i], c.nasTimeoutMillis);
        }
        throw e; // the metadata stays open: fsck completes the file after its timeout
      }
    }
    final Metadata open = created.meta;
    ReplicatingOutputStream out = new ReplicatingOutputStream(created.files, created.channels, 0,
        new CRC32C(), (length, crc) -> closeMetadata(local, open, length, crc), c.nasTimeoutMillis);
    return new FSDataOutputStream(out, statistics);
  }

  static final class Created {
    final List<java.nio.file.Path> files;
    final FileChannel[] channels;
    final Metadata meta;

    Created(List<java.nio.file.Path> files, FileChannel[] channels, Metadata meta) {
      this.files = files;
      this.channels = channels;
      this.meta = meta;
    }
  }

  /**
   * Algorithm 1, lines 3–11 (the caller holds LOCK(filepath), lines 2 and 12). A failure rolls back what this
   * call made (replicas, metadata) before it throws; a crash leaves what fsck cleans up.
   */
  Created algorithm1Create(RainConfig c, java.nio.file.Path filepath, int replication) throws IOException {
    for (int attempt = 0; ; attempt++) {
      crash("create", 3);
      long rndId = ThreadLocalRandom.current().nextLong(); // 3: rndID <- RNDGEN.NEXTLONG
      int nasCount = c.nasCount();
      int nasStart = (int) Math.floorMod(rndId, (long) nasCount); // 4: nasStart <- rndID mod nasCount
      long bucket = Math.floorMod(rndId, 1L << c.bucketPower); // 5: bucket <- rndID mod 2^bucketPower
      if (attempt < HUNG_REDRAWS_MAX && touchesSuspect(c, nasStart, replication) && anyPlacementAvoidsSuspect(c,
          replication)) {
        continue; // a NAS of this placement hangs: draw again, as on a collision (beyond the seed)
      }
      List<java.nio.file.Path> files = new ArrayList<>();
      FileChannel[] channels = new FileChannel[replication];
      boolean metaWritten = false;
      try {
        for (int i = 0; i < replication; i++) { // 6
          crash("create", 7);
          java.nio.file.Path nas = c.nas.get((nasStart + i) % nasCount);
          files.add(Layout.replica(nas, bucket, rndId)); // 7: BUILDPATH
          crash("create", 8);
          channels[i] = createReplica(nas, files.get(i), c.nasTimeoutMillis); // 8: FILE.CREATE(files[i])
        }
        Metadata meta = Metadata.open(replication, files);
        crash("create", 10);
        meta.write(filepath); // 10: CREATEMETASTORE(filepath)
        metaWritten = true;
        crash("create", 11);
        Files.createSymbolicLink(filepath, files.get(0)); // 11: SYMLINK(filepath, files[0])
        crash("create", 12);
        return new Created(files, channels, meta);
      } catch (IOException e) {
        for (FileChannel ch : channels) {
          if (ch != null) {
            ch.close();
          }
        }
        if (metaWritten) {
          Files.deleteIfExists(Layout.metaFile(filepath));
        }
        for (int i = 0; i < files.size(); i++) {
          if (channels[i] != null) {
            Files.deleteIfExists(files.get(i));
          }
        }
        if (e instanceof CollisionException && attempt < 8) {
          continue; // another file already has this rndID: draw again
        }
        if (e instanceof HungNasException && attempt < HUNG_REDRAWS_MAX && anyPlacementAvoidsSuspect(c,
            replication)) {
          continue; // a NAS stopped answering during this create (it is suspect now): draw again
        }
        throw e;
      }
    }
  }

  /** Draws of rndID that may be spent avoiding a suspect NAS (each avoids it with probability >= 1/nasCount). */
  private static final int HUNG_REDRAWS_MAX = 64;

  /** Whether the placement starting at {@code nasStart} puts a replica on a suspect (hung) NAS. */
  private static boolean touchesSuspect(RainConfig c, int nasStart, int replication) {
    for (int i = 0; i < replication; i++) {
      if (NasGuard.ofMount(c.nas.get((nasStart + i) % c.nasCount())).isSuspect()) {
        return true;
      }
    }
    return false;
  }

  /** Whether some placement of Algorithm 1 (some nasStart) avoids every suspect NAS. */
  private static boolean anyPlacementAvoidsSuspect(RainConfig c, int replication) {
    for (int start = 0; start < c.nasCount(); start++) {
      if (!touchesSuspect(c, start, replication)) {
        return true;
      }
    }
    return false;
  }

  /** FILE.CREATE found its NAS hung (timed out now, or suspect already). */
  private static final class HungNasException extends IOException {
    HungNasException(String msg, Throwable cause) {
      super(msg, cause);
    }
  }

  private static final class CollisionException extends IOException {
    CollisionException(java.nio.file.Path p) {
      super("rainfs: replica " + p + " already exists");
    }
  }

  /**
   * FILE.CREATE of a replica; the NAS mount itself must exist (never create a missing mount point). A NAS that
   * does not answer within the timeout, or is suspect already, is unavailable like a missing one.
   */
  static FileChannel createReplica(java.nio.file.Path nas, java.nio.file.Path file, long timeoutMillis)
      throws IOException {
    try {
      return NasGuard.ofMount(nas).call("create " + file, timeoutMillis, () -> {
        if (!Files.isDirectory(nas)) {
          throw new IOException("rainfs: NAS " + nas + " is unavailable (not a directory)");
        }
        Files.createDirectories(file.getParent());
        try {
          return FileChannel.open(file, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE);
        } catch (FileAlreadyExistsException e) {
          throw new CollisionException(file);
        }
      }, ch -> {
        if (ch != null) { // created after we gave up: undo it (fsck would sweep it as leaked otherwise)
          ch.close();
          Files.deleteIfExists(file);
        }
      });
    } catch (NasGuard.NasTimeoutException | NasGuard.SuspectNasException e) {
      throw new HungNasException("rainfs: NAS " + nas + " is unavailable (not answering): " + e.getMessage(), e);
    }
  }

  /** After a clean close: record length and CRC-32C, if the entry still holds this file. */
  private void closeMetadata(java.nio.file.Path local, Metadata open, long length, long crc)
      throws IOException {
    try (PathLocks.Held l = PathLocks.lock(local)) {
      Metadata now;
      try {
        now = Metadata.read(local);
      } catch (Metadata.CorruptMetadataException e) {
        return; // fsck reports it
      }
      if (now != null && now.replicas.equals(open.replicas) && Namespace.classify(local) == Kind.RAIN_FILE) {
        now.closedWith(length, crc).write(local);
      }
      // else: deleted, moved or overwritten while open; fsck closes a moved file's metadata after its timeout
    }
  }

  // ---------------------------------------------------------------------------------------------------------
  // Algorithm 2: delete.

  @Override
  public boolean delete(Path f, boolean recursive) throws IOException {
    RainConfig c = config();
    java.nio.file.Path local = local(c, f);
    Kind k = Namespace.classify(local);
    switch (k) {
      case MISSING:
        return false;
      case DIR:
        boolean empty = visibleChildren(local).isEmpty();
        if (!empty && !recursive) {
          throw new PathIsNotEmptyDirectoryException("rainfs: " + f + " is a non-empty directory");
        }
        deleteTree(local, local.equals(c.namespace));
        return true;
      default:
        try (PathLocks.Held l = PathLocks.lock(local)) {
          Kind again = Namespace.classify(local);
          if (again == Kind.MISSING || again == Kind.DIR) {
            return false;
          }
          deleteFileLocked(local, again);
          return true;
        }
    }
  }

  private void deleteFileLocked(java.nio.file.Path local, Kind k) throws IOException {
    if (k == Kind.RAIN_FILE) {
      algorithm2Delete(local);
    } else {
      Files.delete(local);
    }
  }

  /**
   * Algorithm 2, lines 3–8 (the caller holds LOCK(filepath)): symlink first, then the replicas, metadata last,
   * so an interrupted delete leaves metadata that tells fsck which replicas remain. A replica on an
   * unavailable NAS stays behind with the metadata, for fsck to finish.
   */
  void algorithm2Delete(java.nio.file.Path filepath) throws IOException {
    algorithm2Delete(filepath, config().nasTimeoutMillis);
  }

  void algorithm2Delete(java.nio.file.Path filepath, long timeoutMillis) throws IOException {
    crash("delete", 3);
    Metadata meta;
    try {
      meta = Metadata.read(filepath); // 3: replicas <- GETREPLICAS(filepath)
    } catch (Metadata.CorruptMetadataException e) {
      meta = null; // the symlink still goes; fsck reports the metadata and sweeps the replicas
    }
    crash("delete", 4);
    Files.delete(filepath); // 4: FILE.DELETE(filepath)
    if (meta == null) {
      return;
    }
    boolean all = true;
    for (int i = 0; i < meta.replicas.size(); i++) { // 5
      crash("delete", 6);
      try {
        java.nio.file.Path r = meta.replicas.get(i);
        onNas(r, "delete", timeoutMillis, () -> Files.deleteIfExists(r)); // 6: FILE.DELETE(replicas[i])
      } catch (IOException e) { // unavailable or hung NAS: the replica stays for fsck
        all = false;
      }
    }
    crash("delete", 8);
    if (all) {
      Files.deleteIfExists(Layout.metaFile(filepath)); // 8: FILE.DELETE(filepath.metadata)
    }
    crash("delete", 9);
  }

  /** Delete a directory tree: every file by Algorithm 2 under its lock, then the directories. */
  private void deleteTree(java.nio.file.Path dir, boolean keepDir) throws IOException {
    List<java.nio.file.Path> all = new ArrayList<>();
    try (DirectoryStream<java.nio.file.Path> ds = Files.newDirectoryStream(dir)) {
      ds.forEach(all::add);
    }
    for (java.nio.file.Path child : all) {
      String name = child.getFileName().toString();
      if (Layout.isReserved(name)) {
        continue;
      }
      Kind k = Namespace.classify(child);
      if (k == Kind.DIR && !Files.isSymbolicLink(child)) {
        deleteTree(child, false);
      } else if (k != Kind.MISSING) {
        try (PathLocks.Held l = PathLocks.lock(child)) {
          Kind again = Namespace.classify(child);
          if (again != Kind.MISSING) {
            if (again == Kind.DIR) {
              Files.delete(child); // a symlink to a directory: remove the link only
            } else {
              deleteFileLocked(child, again);
            }
          }
        }
      }
    }
    // What is left is hidden: lock files, temporaries, and metadata of interrupted operations, whose
    // replicas go with them (the same roll-back fsck would do).
    try (DirectoryStream<java.nio.file.Path> ds = Files.newDirectoryStream(dir)) {
      for (java.nio.file.Path child : ds) {
        String name = child.getFileName().toString();
        String entryName = Layout.entryOfMeta(name);
        if (entryName != null && !Files.exists(child.resolveSibling(entryName), LinkOption.NOFOLLOW_LINKS)) {
          try {
            Metadata m = Metadata.decode(Files.readString(child));
            for (java.nio.file.Path r : m.replicas) {
              Files.deleteIfExists(r);
            }
          } catch (IOException e) {
            // corrupt: fsck sweeps its replicas as leaked
          }
        }
        if (Layout.isReserved(name) && !(name.equals(RainConfig.DATA_DIR) && keepDir)) {
          if (Files.isDirectory(child, LinkOption.NOFOLLOW_LINKS)) {
            continue; // a .rainfs data folder when the namespace is a NAS root: never ours to remove
          }
          Files.deleteIfExists(child);
        }
      }
    }
    if (!keepDir) {
      Files.delete(dir);
    }
  }

  // ---------------------------------------------------------------------------------------------------------
  // Algorithm 3: move.

  @Override
  public boolean rename(Path src, Path dst) throws IOException {
    RainConfig c = config();
    java.nio.file.Path from = local(c, src);
    java.nio.file.Path to = local(c, dst);
    if (from.equals(c.namespace)) {
      return false;
    }
    Kind ks = Namespace.classify(from);
    if (ks == Kind.MISSING) {
      return false;
    }
    if (from.equals(to)) {
      return ks != Kind.DIR;
    }
    Kind kd = Namespace.classify(to);
    if (kd == Kind.DIR) {
      to = to.resolve(from.getFileName());
      if (from.equals(to)) {
        return true;
      }
      if (Namespace.classify(to) != Kind.MISSING) {
        return false;
      }
    } else if (kd != Kind.MISSING) {
      return false;
    }
    java.nio.file.Path parent = to.getParent();
    if (parent == null || Namespace.classify(parent) != Kind.DIR) {
      return false;
    }
    if (ks == Kind.DIR) {
      if (to.startsWith(from)) {
        return false;
      }
      try {
        Files.move(from, to, StandardCopyOption.ATOMIC_MOVE);
      } catch (FileAlreadyExistsException | java.nio.file.DirectoryNotEmptyException e) {
        return false;
      }
      return true;
    }
    return algorithm3Move(from, to);
  }

  /** Algorithm 3: lock both paths in one global order (greater first), metadata at the target first. */
  boolean algorithm3Move(java.nio.file.Path filepath, java.nio.file.Path newpath) throws IOException {
    PathLocks.Held first = null;
    PathLocks.Held second = null;
    try {
      if (filepath.toString().compareTo(newpath.toString()) > 0) { // 2
        first = PathLocks.lock(filepath); // 3
        second = PathLocks.lock(newpath); // 4
      } else {
        first = PathLocks.lock(newpath); // 6
        second = PathLocks.lock(filepath); // 7
      }
      Kind k = Namespace.classify(filepath);
      if (k == Kind.MISSING || k == Kind.DIR || Namespace.classify(newpath) != Kind.MISSING) {
        return false; // changed while we waited for the locks
      }
      if (k == Kind.PLAIN_FILE) {
        Files.move(filepath, newpath, StandardCopyOption.ATOMIC_MOVE);
        return true;
      }
      crash("move", 9);
      Metadata meta = Metadata.read(filepath);
      if (meta == null) {
        return false;
      }
      meta.write(newpath); // 9: UPDATEMETASTORE(newpath, filepath)
      crash("move", 10);
      Files.move(filepath, newpath, StandardCopyOption.ATOMIC_MOVE); // 10: FILE.MOVE(filepath, newpath)
      crash("move", 11);
      Files.delete(Layout.metaFile(filepath)); // 11: FILE.DELETE(filepath.metadata)
      crash("move", 12);
      return true;
    } finally {
      // 12–13: UNLOCK(filepath), UNLOCK(newpath)
      PathLocks.Held src = filepath.toString().compareTo(newpath.toString()) > 0 ? first : second;
      PathLocks.Held dst = src == first ? second : first;
      try {
        if (src != null) {
          src.close();
        }
      } finally {
        if (dst != null) {
          dst.close();
        }
      }
    }
  }

  // ---------------------------------------------------------------------------------------------------------
  // Reads: replica 0, failing over to the others (§2.6.4).

  @Override
  public FSDataInputStream open(Path f, int bufferSize) throws IOException {
    RainConfig c = config();
    java.nio.file.Path local = local(c, f);
    Kind k = Namespace.classify(local);
    switch (k) {
      case MISSING:
        throw new FileNotFoundException("rainfs: " + f + " does not exist");
      case DIR:
        throw new FileNotFoundException("rainfs: " + f + " is a directory");
      default:
        List<java.nio.file.Path> replicas = readOrder(local, k);
        return new FSDataInputStream(new BufferedFSInputStream(
            new FailoverInputStream(local, replicas, statistics, c.nasTimeoutMillis), bufferSize));
    }
  }

  /** Replicas in read order: the symlink's target (replica 0) first, then the rest as the metadata lists. */
  static List<java.nio.file.Path> readOrder(java.nio.file.Path local, Kind k) throws IOException {
    List<java.nio.file.Path> out = new ArrayList<>();
    if (k == Kind.RAIN_FILE) {
      java.nio.file.Path target = null;
      try {
        target = Files.readSymbolicLink(local);
        out.add(target);
      } catch (IOException e) {
        // gone between classify and here: fall through to the metadata
      }
      Metadata meta;
      try {
        meta = Metadata.read(local);
      } catch (Metadata.CorruptMetadataException e) {
        meta = null;
      }
      if (meta != null) {
        for (java.nio.file.Path r : meta.replicas) {
          if (!r.equals(target)) {
            out.add(r);
          }
        }
      }
      if (out.isEmpty()) {
        throw new FileNotFoundException("rainfs: " + local + " vanished");
      }
    } else {
      out.add(local);
    }
    return out;
  }

  @Override
  public FSDataOutputStream append(Path f, int bufferSize, Progressable progress) throws IOException {
    RainConfig c = config();
    java.nio.file.Path local = local(c, f);
    try (PathLocks.Held l = PathLocks.lock(local)) {
      Kind k = Namespace.classify(local);
      if (k == Kind.MISSING) {
        throw new FileNotFoundException("rainfs: " + f + " does not exist");
      }
      if (k == Kind.DIR) {
        throw new FileNotFoundException("rainfs: " + f + " is a directory");
      }
      List<java.nio.file.Path> replicas = k == Kind.RAIN_FILE ? Metadata.read(local).replicas : List.of(local);
      long timeoutMillis = k == Kind.RAIN_FILE ? c.nasTimeoutMillis : 0;
      CRC32C crc = new CRC32C();
      long length = 0;
      try (InputStream in = new FailoverInputStream(local, replicas, null, timeoutMillis)) {
        byte[] b = new byte[1 << 16];
        for (int n; (n = in.read(b)) > 0; ) {
          crc.update(b, 0, n);
          length += n;
        }
      }
      FileChannel[] channels = new FileChannel[replicas.size()];
      try {
        for (int i = 0; i < channels.length; i++) {
          java.nio.file.Path r = replicas.get(i);
          channels[i] = NasGuard.of(r).call("open " + r, timeoutMillis,
              () -> FileChannel.open(r, StandardOpenOption.WRITE, StandardOpenOption.APPEND), ch -> {
                if (ch != null) {
                  ch.close();
                }
              });
          final FileChannel ch = channels[i];
          if (NasGuard.of(r).call("stat " + r, timeoutMillis, ch::size) != length) {
            throw new IOException("rainfs: replica " + replicas.get(i) + " differs in length from replica 0;"
                + " run rainfs fsck");
          }
        }
      } catch (IOException e) {
        for (int i = 0; i < channels.length; i++) {
          NasGuard.of(replicas.get(i)).release(channels[i], timeoutMillis);
        }
        throw e;
      }
      ReplicatingOutputStream.OnClose onClose;
      if (k == Kind.RAIN_FILE) {
        Metadata open = Metadata.read(local).reopened();
        open.write(local);
        onClose = (len, sum) -> closeMetadata(local, open, len, sum);
      } else {
        onClose = (len, sum) -> { };
      }
      return new FSDataOutputStream(new ReplicatingOutputStream(replicas, channels, length, crc, onClose,
          timeoutMillis), statistics, length);
    }
  }

  // ---------------------------------------------------------------------------------------------------------
  // Directories and status: the managing NAS's namespace, much as RawLocalFileSystem (§2.6.3).

  @Override
  public boolean mkdirs(Path f, FsPermission permission) throws IOException {
    RainConfig c = config();
    java.nio.file.Path local = local(c, f);
    java.nio.file.Path at = c.namespace;
    java.nio.file.Path rel = c.namespace.relativize(local);
    int parts = local.equals(c.namespace) ? 0 : rel.getNameCount();
    FsPermission perm = (permission == null ? FsPermission.getDirDefault() : permission)
        .applyUMask(FsPermission.getUMask(getConf()));
    for (int i = 0; i < parts; i++) {
      at = at.resolve(rel.getName(i));
      Kind k = Namespace.classify(at);
      if (k == Kind.DIR) {
        continue;
      }
      if (k != Kind.MISSING) {
        if (i == parts - 1) {
          throw new org.apache.hadoop.fs.FileAlreadyExistsException("rainfs: " + f + " is a file");
        }
        throw new ParentNotDirectoryException("rainfs: " + hadoopPath(c, at) + " is a file");
      }
      try {
        Files.createDirectory(at);
        setLocalPermission(at, perm);
      } catch (FileAlreadyExistsException e) {
        if (Namespace.classify(at) != Kind.DIR) {
          throw new ParentNotDirectoryException("rainfs: " + hadoopPath(c, at) + " is a file");
        }
      }
    }
    return true;
  }

  private static List<java.nio.file.Path> visibleChildren(java.nio.file.Path dir) throws IOException {
    List<java.nio.file.Path> out = new ArrayList<>();
    try (DirectoryStream<java.nio.file.Path> ds = Files.newDirectoryStream(dir)) {
      for (java.nio.file.Path p : ds) {
        if (!Layout.isReserved(p.getFileName().toString())) {
          out.add(p);
        }
      }
    }
    return out;
  }

  @Override
  public FileStatus[] listStatus(Path f) throws IOException {
    RainConfig c = config();
    java.nio.file.Path local = local(c, f);
    Kind k = Namespace.classify(local);
    if (k == Kind.MISSING) {
      throw new FileNotFoundException("rainfs: " + f + " does not exist");
    }
    if (k != Kind.DIR) {
      return new FileStatus[] {status(c, local, k)};
    }
    List<FileStatus> out = new ArrayList<>();
    for (java.nio.file.Path child : visibleChildren(local)) {
      Kind ck = Namespace.classify(child);
      if (ck == Kind.MISSING) {
        continue; // deleted while we listed
      }
      try {
        out.add(status(c, child, ck));
      } catch (FileNotFoundException e) {
        // deleted while we listed
      }
    }
    return out.toArray(new FileStatus[0]);
  }

  @Override
  public FileStatus getFileStatus(Path f) throws IOException {
    RainConfig c = config();
    java.nio.file.Path local = local(c, f);
    Kind k = Namespace.classify(local);
    if (k == Kind.MISSING) {
      throw new FileNotFoundException("rainfs: " + f + " does not exist");
    }
    return status(c, local, k);
  }

  private FileStatus status(RainConfig c, java.nio.file.Path local, Kind k) throws IOException {
    Path path = hadoopPath(c, local);
    long timeoutMillis = k == Kind.RAIN_FILE ? c.nasTimeoutMillis : 0; // the namespace itself is not guarded
    if (k == Kind.DIR) {
      PosixFileAttributes a = posix(local);
      return new FileStatus(0, true, 1, 0, a.lastModifiedTime().toMillis(), a.lastAccessTime().toMillis(),
          permission(a.permissions()), a.owner().getName(), a.group().getName(), path);
    }
    List<java.nio.file.Path> order;
    int replication = 1;
    if (k == Kind.RAIN_FILE) {
      order = readOrder(local, k);
      replication = order.size();
    } else {
      order = List.of(local);
    }
    IOException last = null;
    for (java.nio.file.Path r : order) {
      try {
        PosixFileAttributes a = NasGuard.of(r).call("stat " + r, timeoutMillis, () -> posix(r));
        return new FileStatus(a.size(), false, replication, getDefaultBlockSize(), a.lastModifiedTime().toMillis(),
            a.lastAccessTime().toMillis(), permission(a.permissions()), a.owner().getName(),
            a.group().getName(), path);
      } catch (IOException e) {
        last = e; // that replica's NAS is unavailable: ask the next (§2.6.4)
      }
    }
    if (k == Kind.PLAIN_FILE && last instanceof NoSuchFileException) {
      throw new FileNotFoundException("rainfs: " + path + ": " + last);
    }
    throw new IOException("rainfs: no replica of " + path + " is reachable; last error: " + last, last);
  }

  private static PosixFileAttributes posix(java.nio.file.Path p) throws IOException {
    return Files.readAttributes(p, PosixFileAttributes.class);
  }

  private static FsPermission permission(Set<PosixFilePermission> s) {
    int mode = 0;
    for (PosixFilePermission p : s) {
      mode |= 1 << (8 - p.ordinal());
    }
    return new FsPermission((short) mode);
  }

  private static Set<PosixFilePermission> posixSet(FsPermission perm) {
    Set<PosixFilePermission> s = EnumSet.noneOf(PosixFilePermission.class);
    short mode = perm.toShort();
    for (PosixFilePermission p : PosixFilePermission.values()) {
      if ((mode & (1 << (8 - p.ordinal()))) != 0) {
        s.add(p);
      }
    }
    return s;
  }

  private static void setLocalPermission(java.nio.file.Path p, FsPermission perm) throws IOException {
    Files.setPosixFilePermissions(p, posixSet(perm));
  }

  private static void applyPermission(List<java.nio.file.Path> files, FsPermission perm, long timeoutMillis)
      throws IOException {
    for (java.nio.file.Path p : files) {
      onNas(p, "chmod", timeoutMillis, () -> setLocalPermission(p, perm));
    }
  }

  /** A call that touches the NAS holding {@code p} (a replica), under its {@link NasGuard}. */
  interface NasAction {
    void run() throws IOException;
  }

  static void onNas(java.nio.file.Path p, String what, long timeoutMillis, NasAction a) throws IOException {
    NasGuard.of(p).call(what + " " + p, timeoutMillis, () -> {
      a.run();
      return null;
    });
  }

  /** What an attribute change does to one file. */
  interface TargetAction {
    void apply(java.nio.file.Path t) throws IOException;
  }

  /**
   * Apply an attribute change to every replica of a RainFS file (each under its NAS's guard: a hung NAS fails
   * the call instead of hanging it), else to the entry itself.
   */
  private void forEachTarget(Path f, String what, TargetAction a) throws IOException {
    RainConfig c = config();
    java.nio.file.Path local = local(c, f);
    Kind k = Namespace.classify(local);
    switch (k) {
      case MISSING:
        throw new FileNotFoundException("rainfs: " + f + " does not exist");
      case RAIN_FILE:
        for (java.nio.file.Path t : readOrder(local, k)) {
          onNas(t, what, c.nasTimeoutMillis, () -> a.apply(t));
        }
        break;
      default:
        a.apply(local);
    }
  }

  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    forEachTarget(p, "chmod", t -> setLocalPermission(t, permission));
  }

  @Override
  public void setOwner(Path p, String username, String groupname) throws IOException {
    UserPrincipalLookupService users = java.nio.file.FileSystems.getDefault().getUserPrincipalLookupService();
    forEachTarget(p, "chown", t -> {
      PosixFileAttributeView v = Files.getFileAttributeView(t, PosixFileAttributeView.class);
      if (username != null) {
        v.setOwner(users.lookupPrincipalByName(username));
      }
      if (groupname != null) {
        v.setGroup(users.lookupPrincipalByGroupName(groupname));
      }
    });
  }

  @Override
  public void setTimes(Path p, long mtime, long atime) throws IOException {
    forEachTarget(p, "utimes", t -> Files.getFileAttributeView(t, BasicFileAttributeView.class).setTimes(
        mtime >= 0 ? FileTime.fromMillis(mtime) : null, atime >= 0 ? FileTime.fromMillis(atime) : null, null));
  }

  @Override
  public boolean hasPathCapability(Path path, String capability) throws IOException {
    switch (org.apache.hadoop.fs.impl.PathCapabilitiesSupport.validatePathCapabilityArgs(
        makeQualified(path), capability)) {
      case org.apache.hadoop.fs.CommonPathCapabilities.FS_APPEND:
      case org.apache.hadoop.fs.CommonPathCapabilities.FS_PERMISSIONS:
      case org.apache.hadoop.fs.CommonPathCapabilities.FS_SYMLINKS:
        return capability.equals(org.apache.hadoop.fs.CommonPathCapabilities.FS_APPEND)
            || capability.equals(org.apache.hadoop.fs.CommonPathCapabilities.FS_PERMISSIONS);
      default:
        return super.hasPathCapability(path, capability);
    }
  }

  @Override
  public boolean setReplication(Path src, short replication) throws IOException {
    return false; // the seed has no re-replication on demand; fsck brings files up to their factor
  }
}
