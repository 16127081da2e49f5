package org.ecstack.rainfs;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.stream.Stream;
import java.util.zip.CRC32C;

/**
 * The on-disk state of a consistent RainFS, checked from the files themselves (not through RainFileSystem or
 * RainFsck): every visible file is a symlink to replica 0 with closed metadata beside it; its replicas exist on
 * distinct NAS systems, agree with the metadata's length and CRC-32C; no metadata is orphaned; every replica
 * file in every bucket belongs to exactly one file.
 */
final class Invariants {
  private Invariants() {}

  static void check(RainTestbed bed, int wantReplicas) throws IOException {
    Set<Path> referenced = new HashSet<>();
    List<Path> entries = new ArrayList<>();
    walk(bed.namespace, entries);
    for (Path e : entries) {
      assertTrue("not a symlink: " + e, Files.isSymbolicLink(e));
      Metadata m = Metadata.read(e);
      assertNotNull("no metadata beside " + e, m);
      assertTrue("metadata still open: " + e, m.closed);
      // wantReplicas < 0: as many as the file asked for (jobs ask for more than the default, e.g. TeraSort's
      // partition file), which create caps at the NAS count.
      int want = wantReplicas >= 0 ? wantReplicas
          : Math.min(m.replication, RainConfig.load(bed.configFile).nasCount());
      assertEquals("replica count of " + e, want, m.replicas.size());
      assertEquals("symlink target of " + e, m.replicas.get(0), Files.readSymbolicLink(e));
      Set<Path> mounts = new HashSet<>();
      for (Path r : m.replicas) {
        assertTrue("replica shared by two files: " + r, referenced.add(r));
        assertTrue("missing replica " + r + " of " + e, Files.isRegularFile(r));
        assertEquals("length of " + r, m.length, Files.size(r));
        assertEquals("crc32c of " + r, m.crc32c, crc(r));
        Path mount = r.getParent().getParent().getParent();
        assertTrue("two replicas of " + e + " on " + mount, mounts.add(mount));
      }
    }
    for (Path nas : bed.nas) {
      Path data = nas.resolve(RainConfig.DATA_DIR);
      if (!Files.isDirectory(data)) {
        continue;
      }
      try (Stream<Path> s = Files.walk(data)) {
        s.filter(Files::isRegularFile).forEach(f -> {
          if (!referenced.contains(f)) {
            fail("leaked replica " + f);
          }
        });
      }
    }
  }

  private static void walk(Path dir, List<Path> entries) throws IOException {
    try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir)) {
      for (Path p : ds) {
        String name = p.getFileName().toString();
        String of = Layout.entryOfMeta(name);
        if (of != null) {
          assertTrue("orphan metadata " + p, Files.exists(p.resolveSibling(of), LinkOption.NOFOLLOW_LINKS));
          continue;
        }
        if (name.endsWith(Layout.TMP_SUFFIX)) {
          fail("temporary left " + p);
        }
        if (Layout.isReserved(name)) {
          continue;
        }
        if (Files.isDirectory(p, LinkOption.NOFOLLOW_LINKS)) {
          walk(p, entries);
        } else {
          entries.add(p);
        }
      }
    }
  }

  static long crc(Path p) throws IOException {
    CRC32C c = new CRC32C();
    try (InputStream in = Files.newInputStream(p)) {
      byte[] b = new byte[1 << 16];
      for (int n; (n = in.read(b)) > 0; ) {
        c.update(b, 0, n);
      }
    }
    return c.getValue();
  }
}
