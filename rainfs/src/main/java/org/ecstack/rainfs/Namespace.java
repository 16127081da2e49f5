package org.ecstack.rainfs;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;

/** What an entry of the namespace on the managing NAS is (no Hadoop classes here: fsck runs without them). */
final class Namespace {
  enum Kind { MISSING, DIR, RAIN_FILE, PLAIN_FILE }

  private Namespace() {}

  /**
   * A directory; a RainFS file (a symlink with metadata beside it); or a plain file (a regular file or a
   * symlink without metadata, put there by a POSIX application, §2.6.2).
   */
  static Kind classify(Path local) {
    BasicFileAttributes a;
    try {
      a = Files.readAttributes(local, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
    } catch (IOException e) {
      return Kind.MISSING;
    }
    if (a.isDirectory()) {
      return Kind.DIR;
    }
    if (a.isSymbolicLink()) {
      if (Files.exists(Layout.metaFile(local), LinkOption.NOFOLLOW_LINKS)) {
        return Kind.RAIN_FILE;
      }
      return Files.isDirectory(local) ? Kind.DIR : Kind.PLAIN_FILE;
    }
    return Kind.PLAIN_FILE;
  }
}
