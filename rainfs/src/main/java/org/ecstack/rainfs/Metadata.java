package org.ecstack.rainfs;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;
import java.util.zip.CRC32;

/**
 * The hidden metadata file beside each symlink (seed §2.6.2): which replicas a file has.
 *
 * <p>Format, version 1, UTF-8 text, one field a line, written to a temporary file and renamed into place:
 * <pre>
 * rainfs-meta 1
 * replication 2                 # factor asked for at create (fsck re-replicates up to it)
 * state closed                  # open while a writer has it; closed after a clean close
 * length 1048576                # closed only: bytes in every replica
 * crc32c 1a2b3c4d               # closed only: CRC-32C of the whole content, how fsck finds a corrupt replica
 * replica /mnt/nas1/.rainfs/000a/9f...   # replica 0 first (the symlink's target), then the others
 * replica /mnt/nas2/.rainfs/000a/9f...
 * check 89abcdef                # CRC-32 of every byte before this line
 * </pre>
 * A file that fails any check (magic, version, field, checksum) is refused as corrupt metadata.
 */
final class Metadata {
  static final String MAGIC = "rainfs-meta";
  static final int VERSION = 1;

  final int replication;
  final boolean closed;
  final long length;
  final long crc32c;
  final List<Path> replicas;

  Metadata(int replication, boolean closed, long length, long crc32c, List<Path> replicas) {
    if (replicas.isEmpty() || replication < 1) {
      throw new IllegalArgumentException("metadata needs a replica and replication >= 1");
    }
    this.replication = replication;
    this.closed = closed;
    this.length = closed ? length : -1;
    this.crc32c = closed ? crc32c : 0;
    this.replicas = Collections.unmodifiableList(new ArrayList<>(replicas));
  }

  static Metadata open(int replication, List<Path> replicas) {
    return new Metadata(replication, false, -1, 0, replicas);
  }

  Metadata closedWith(long length, long crc32c) {
    return new Metadata(replication, true, length, crc32c, replicas);
  }

  Metadata withReplicas(List<Path> replicas) {
    return new Metadata(replication, closed, length, crc32c, replicas);
  }

  Metadata reopened() {
    return new Metadata(replication, false, -1, 0, replicas);
  }

  String encode() {
    StringBuilder b = new StringBuilder();
    b.append(MAGIC).append(' ').append(VERSION).append('\n');
    b.append("replication ").append(replication).append('\n');
    b.append("state ").append(closed ? "closed" : "open").append('\n');
    if (closed) {
      b.append("length ").append(length).append('\n');
      b.append("crc32c ").append(String.format("%08x", crc32c)).append('\n');
    }
    for (Path r : replicas) {
      String s = r.toString();
      if (s.indexOf('\n') >= 0) {
        throw new IllegalArgumentException("replica path with a newline: " + s);
      }
      b.append("replica ").append(s).append('\n');
    }
    CRC32 c = new CRC32();
    c.update(b.toString().getBytes(StandardCharsets.UTF_8));
    b.append("check ").append(String.format("%08x", c.getValue())).append('\n');
    return b.toString();
  }

  static Metadata decode(String text) throws CorruptMetadataException {
    int checkAt = text.lastIndexOf("check ");
    if (checkAt < 0 || !text.endsWith("\n")) {
      throw new CorruptMetadataException("no checksum line");
    }
    CRC32 c = new CRC32();
    c.update(text.substring(0, checkAt).getBytes(StandardCharsets.UTF_8));
    String want = text.substring(checkAt + 6, text.length() - 1);
    if (!want.equals(String.format("%08x", c.getValue()))) {
      throw new CorruptMetadataException("checksum mismatch");
    }
    String[] lines = text.substring(0, checkAt).split("\n");
    if (lines.length < 3 || !lines[0].startsWith(MAGIC + " ")) {
      throw new CorruptMetadataException("bad magic");
    }
    int version = parseInt(lines[0].substring(MAGIC.length() + 1));
    if (version != VERSION) {
      throw new CorruptMetadataException("unknown version " + version);
    }
    int replication = -1;
    Boolean closed = null;
    long length = -1;
    long crc = -1;
    List<Path> replicas = new ArrayList<>();
    for (int i = 1; i < lines.length; i++) {
      String l = lines[i];
      int sp = l.indexOf(' ');
      if (sp < 0) {
        throw new CorruptMetadataException("bad line: " + l);
      }
      String k = l.substring(0, sp);
      String v = l.substring(sp + 1);
      switch (k) {
        case "replication" -> replication = parseInt(v);
        case "state" -> {
          if (!v.equals("open") && !v.equals("closed")) {
            throw new CorruptMetadataException("bad state " + v);
          }
          closed = v.equals("closed");
        }
        case "length" -> length = parseLong(v, 10);
        case "crc32c" -> crc = parseLong(v, 16);
        case "replica" -> {
          Path p = Paths.get(v);
          if (!p.isAbsolute()) {
            throw new CorruptMetadataException("relative replica path " + v);
          }
          replicas.add(p);
        }
        default -> throw new CorruptMetadataException("unknown field " + k);
      }
    }
    if (replication < 1 || closed == null || replicas.isEmpty()) {
      throw new CorruptMetadataException("missing field");
    }
    if (closed && (length < 0 || crc < 0)) {
      throw new CorruptMetadataException("closed without length and crc32c");
    }
    return new Metadata(replication, closed, length, crc, replicas);
  }

  private static int parseInt(String s) throws CorruptMetadataException {
    return (int) parseLong(s, 10);
  }

  private static long parseLong(String s, int radix) throws CorruptMetadataException {
    try {
      return Long.parseLong(s, radix);
    } catch (NumberFormatException e) {
      throw new CorruptMetadataException("bad number " + s);
    }
  }

  /** Read the metadata beside {@code entry}; null if there is none. */
  static Metadata read(Path entry) throws IOException {
    byte[] bytes;
    try {
      bytes = Files.readAllBytes(Layout.metaFile(entry));
    } catch (NoSuchFileException e) {
      return null;
    }
    return decode(new String(bytes, StandardCharsets.UTF_8));
  }

  /** CREATEMETASTORE / UPDATEMETASTORE: write the metadata beside {@code entry} (temporary + rename). */
  void write(Path entry) throws IOException {
    Path tmp = Layout.tmpFile(entry, ThreadLocalRandom.current().nextLong());
    try {
      Files.write(tmp, encode().getBytes(StandardCharsets.UTF_8), StandardOpenOption.CREATE_NEW,
          StandardOpenOption.WRITE);
      try {
        Files.move(tmp, Layout.metaFile(entry), StandardCopyOption.ATOMIC_MOVE,
            StandardCopyOption.REPLACE_EXISTING);
      } catch (AtomicMoveNotSupportedException e) {
        Files.move(tmp, Layout.metaFile(entry), StandardCopyOption.REPLACE_EXISTING);
      }
    } finally {
      Files.deleteIfExists(tmp);
    }
  }

  /** Metadata that fails its checks. */
  static final class CorruptMetadataException extends IOException {
    CorruptMetadataException(String why) {
      super("rainfs: corrupt metadata: " + why);
    }
  }
}
