package org.ecstack.rainfs;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.locks.ReentrantLock;

/**
 * LOCK / UNLOCK of Algorithms 1–3: NAS file locking on a hidden lock file beside the symlink
 * ({@code .<name>.rflock}), taken with {@link FileChannel#lock()} (POSIX fcntl locks, which NFS carries to
 * the NAS). Java file locks belong to the whole JVM, so threads of one JVM first serialize on an in-process
 * lock per lock-file path; the map entry is dropped when nobody holds or waits for it.
 *
 * <p>Lock files are left in place after UNLOCK: unlinking a lock file that another process has opened but
 * not yet locked would let two holders in. They are hidden from listings and removed with their directory.
 */
final class PathLocks {
  private static final Map<Path, Entry> LOCAL = new HashMap<>();

  private static final class Entry {
    final ReentrantLock lock = new ReentrantLock();
    int users;
  }

  /** A held lock; closing it is UNLOCK. */
  static final class Held implements AutoCloseable {
    private final Path lockFile;
    private final Entry entry;
    private final FileChannel channel;
    private final FileLock nasLock;

    private Held(Path lockFile, Entry entry, FileChannel channel, FileLock nasLock) {
      this.lockFile = lockFile;
      this.entry = entry;
      this.channel = channel;
      this.nasLock = nasLock;
    }

    @Override
    public void close() throws IOException {
      try {
        if (nasLock != null) {
          nasLock.release();
        }
      } finally {
        try {
          if (channel != null) {
            channel.close();
          }
        } finally {
          release(lockFile, entry);
        }
      }
    }
  }

  private PathLocks() {}

  /** LOCK(filepath): blocks until this thread holds the lock beside {@code entry}. */
  static Held lock(Path entry) throws IOException {
    Path lockFile = Layout.lockFile(entry);
    Entry e;
    synchronized (LOCAL) {
      e = LOCAL.computeIfAbsent(lockFile, k -> new Entry());
      e.users++;
    }
    e.lock.lock();
    if (e.lock.getHoldCount() > 1) {
      // Re-entered by the same thread (e.g. fsck repairing under a lock it already holds).
      return new Held(lockFile, e, null, null);
    }
    FileChannel ch = null;
    try {
      ch = FileChannel.open(lockFile, StandardOpenOption.CREATE, StandardOpenOption.WRITE);
      FileLock l = ch.lock();
      return new Held(lockFile, e, ch, l);
    } catch (IOException | RuntimeException ex) {
      if (ch != null) {
        try {
          ch.close();
        } catch (IOException ignored) {
          // the lock failed already; report that
        }
      }
      release(lockFile, e);
      throw new IOException("rainfs: cannot lock " + entry + ": " + ex, ex);
    }
  }

  /**
   * True if some holder (this JVM or another process) has the lock beside {@code entry} right now. The probe
   * holds the in-process lock while it opens and closes the lock file: closing any channel of a file may drop
   * every fcntl lock this JVM has on it, so no other thread of this JVM may hold the NAS lock meanwhile.
   */
  static boolean isHeld(Path entry) {
    Path lockFile = Layout.lockFile(entry);
    Entry e;
    synchronized (LOCAL) {
      e = LOCAL.computeIfAbsent(lockFile, k -> new Entry());
      e.users++;
    }
    try {
      if (e.lock.isHeldByCurrentThread() || !e.lock.tryLock()) {
        return true;
      }
      try {
        if (!java.nio.file.Files.exists(lockFile)) {
          return false;
        }
        try (FileChannel ch = FileChannel.open(lockFile, StandardOpenOption.WRITE)) {
          FileLock l = ch.tryLock();
          if (l == null) {
            return true;
          }
          l.release();
          return false;
        } catch (IOException | RuntimeException ex) {
          return true;
        }
      } finally {
        e.lock.unlock();
      }
    } finally {
      synchronized (LOCAL) {
        if (--e.users == 0) {
          LOCAL.remove(lockFile);
        }
      }
    }
  }

  private static void release(Path lockFile, Entry e) {
    e.lock.unlock();
    synchronized (LOCAL) {
      if (--e.users == 0) {
        LOCAL.remove(lockFile);
      }
    }
  }
}
