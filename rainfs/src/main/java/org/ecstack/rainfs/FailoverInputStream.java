package org.ecstack.rainfs;

import java.io.EOFException;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.List;
import org.apache.hadoop.fs.FSExceptionMessages;
import org.apache.hadoop.fs.FSInputStream;
import org.apache.hadoop.fs.FileSystem;

/**
 * The stream open() returns (seed §2.6.3.1, §2.6.4): reads come from replica 0 (the symlink's target) only;
 * when its NAS is unavailable (open or read fails), the stream iterates through the remaining replicas and
 * carries on at the same position. {@link #seekToNewSource} moves to the next replica on request, which is
 * Hadoop's own hook for a reader that distrusts its current source.
 *
 * <p>A NAS that hangs instead of failing (a hard-mounted NFS) is an unavailable NAS too: with
 * {@code nasTimeoutMillis} > 0 every open, read and stat runs through the replica's {@link NasGuard}, and one
 * that takes longer is abandoned and fails over like an error. Replicas on a suspect NAS are skipped at once.
 * Reads then go through a private buffer, never the caller's array, which an abandoned read could still fill.
 */
final class FailoverInputStream extends FSInputStream {
  /** Largest read handed to a NAS thread at once (reads are allowed to return fewer bytes). */
  private static final int GUARDED_READ_BYTES_MAX = 1 << 20;
  /**
   * Smallest read handed to a NAS thread: the hand-off costs microseconds, so small reads are served from the
   * private buffer, filled {@value} bytes at a time at first (4 KiB reads of a cached file ran 7.6x slower
   * without it), doubling while the reader goes on sequentially, up to {@link #GUARDED_READ_BYTES_MAX}.
   */
  private static final int GUARDED_READ_AHEAD_BYTES = 128 << 10;

  private final Path entry;
  private final List<Path> replicas;
  private final FileSystem.Statistics stats;
  private final long timeoutMillis;
  private int current = -1;
  private FileChannel channel;
  /** Where guarded reads land before they are copied out; dropped when a read is abandoned. */
  private byte[] scratch;
  /** The file offset of scratch[0] and how many bytes of scratch are valid (0: none). */
  private long scratchPos;
  private int scratchLen;
  /** How much the next refill of scratch asks for (grows on sequential reads). */
  private int readAhead = GUARDED_READ_AHEAD_BYTES;
  /** The experiment's emulated route for the current replica (null when off). */
  private NasLink.Route route;
  private long pos;
  private boolean closed;
  /** How many times this stream moved to another replica (tests assert the failover path ran). */
  int failovers;
  /** JVM-wide count of failovers (for logs and tests). */
  static final java.util.concurrent.atomic.AtomicLong FAILOVERS = new java.util.concurrent.atomic.AtomicLong();

  FailoverInputStream(Path entry, List<Path> replicas, FileSystem.Statistics stats, long timeoutMillis)
      throws IOException {
    this.entry = entry;
    this.replicas = replicas;
    this.stats = stats;
    this.timeoutMillis = timeoutMillis;
    openFrom(0, null);
  }

  private NasGuard guard() {
    return NasGuard.of(replicas.get(current));
  }

  /** Open the first replica at or after index {@code from} that opens; throw when none does. */
  private void openFrom(int from, IOException why) throws IOException {
    IOException last = why;
    for (int i = from; i < replicas.size(); i++) {
      Path replica = replicas.get(i);
      try {
        channel = NasGuard.of(replica).call("open " + replica, timeoutMillis,
            () -> FileChannel.open(replica, StandardOpenOption.READ),
            ch -> {
              if (ch != null) {
                ch.close(); // opened after we gave up on it
              }
            });
        route = NasLink.readRoute(replica);
        if ((current >= 0 && i != current) || i > 0) {
          failovers++;
          FAILOVERS.incrementAndGet();
          // A timeout is news (NasGuard warned once for the NAS); a skip of a suspect or failed NAS is routine.
          NasGuard.LOG.log(last instanceof NasGuard.NasTimeoutException ? System.Logger.Level.INFO
              : System.Logger.Level.DEBUG, "rainfs: reading " + entry + " from replica " + i + " (" + replica
              + "); last error: " + last);
        }
        current = i;
        return;
      } catch (NasGuard.NasTimeoutException | NasGuard.SuspectNasException e) {
        last = e; // NasGuard logged the mount's change of state
      } catch (IOException e) {
        last = e;
      }
    }
    channel = null;
    if (last instanceof NoSuchFileException || last instanceof FileNotFoundException) {
      throw new FileNotFoundException("rainfs: no replica of " + entry + " can be opened; last error: " + last);
    }
    throw new IOException("rainfs: no replica of " + entry + " can be read; last error: " + last, last);
  }

  /** Move past the current replica after {@code e}; throws when no replica is left. */
  private void failover(IOException e) throws IOException {
    if (!(e instanceof NasGuard.NasTimeoutException)) {
      guard().release(channel, timeoutMillis); // a timed-out call closes it itself once it returns
    }
    channel = null;
    scratchLen = 0;
    openFrom(current + 1, e);
  }

  private void checkOpen() throws IOException {
    if (closed) {
      throw new IOException(FSExceptionMessages.STREAM_IS_CLOSED);
    }
  }

  @Override
  public synchronized int read() throws IOException {
    byte[] one = new byte[1];
    int n = read(one, 0, 1);
    return n <= 0 ? -1 : one[0] & 0xff;
  }

  @Override
  public synchronized int read(byte[] b, int off, int len) throws IOException {
    checkOpen();
    validatePositionedReadArgs(pos, b, off, len);
    if (len == 0) {
      return 0;
    }
    while (true) {
      try {
        int n = readAt(b, off, len);
        if (n > 0) {
          NasLink.charge(route, n);
          pos += n;
          if (stats != null) {
            stats.incrementBytesRead(n);
          }
        }
        return n;
      } catch (IOException e) {
        failover(e);
      }
    }
  }

  /** One read of the current replica at {@link #pos}: guarded through a private buffer, or direct. */
  private int readAt(byte[] b, int off, int len) throws IOException {
    final FileChannel ch = channel;
    final long at = pos;
    if (timeoutMillis <= 0) {
      return ch.read(ByteBuffer.wrap(b, off, len), at);
    }
    if (scratchLen == 0 || at < scratchPos || at >= scratchPos + scratchLen) {
      boolean sequential = scratchLen > 0 && at == scratchPos + scratchLen;
      readAhead = sequential ? Math.min(2 * readAhead, GUARDED_READ_BYTES_MAX) : GUARDED_READ_AHEAD_BYTES;
      final int want = Math.min(Math.max(len, readAhead), GUARDED_READ_BYTES_MAX);
      final byte[] s = scratch != null && scratch.length >= want ? scratch : new byte[want];
      scratch = null; // an abandoned read may still write into s: it is never handed out again
      scratchLen = 0;
      int n = guard().call("read " + replicas.get(current), timeoutMillis,
          () -> ch.read(ByteBuffer.wrap(s, 0, want), at),
          ignored -> ch.close());
      scratch = s;
      if (n <= 0) {
        return n;
      }
      scratchPos = at;
      scratchLen = n;
    }
    int from = (int) (at - scratchPos);
    int n = Math.min(len, scratchLen - from);
    System.arraycopy(scratch, from, b, off, n);
    return n;
  }

  @Override
  public synchronized void seek(long target) throws IOException {
    checkOpen();
    if (target < 0) {
      throw new EOFException(FSExceptionMessages.NEGATIVE_SEEK + " " + target);
    }
    long size = size();
    if (target > size) {
      throw new EOFException(FSExceptionMessages.CANNOT_SEEK_PAST_EOF + " " + target + " > " + size);
    }
    pos = target;
  }

  private long size() throws IOException {
    while (true) {
      try {
        final FileChannel ch = channel;
        return guard().call("stat " + replicas.get(current), timeoutMillis, ch::size, ignored -> ch.close());
      } catch (IOException e) {
        failover(e);
      }
    }
  }

  @Override
  public synchronized long getPos() throws IOException {
    return pos;
  }

  @Override
  public synchronized boolean seekToNewSource(long target) throws IOException {
    checkOpen();
    if (current + 1 >= replicas.size()) {
      return false;
    }
    FileChannel old = channel;
    int was = current;
    try {
      openFrom(current + 1, null);
    } catch (IOException e) {
      channel = old;
      current = was;
      return false;
    }
    NasGuard.of(replicas.get(was)).release(old, timeoutMillis);
    scratchLen = 0;
    seek(target);
    return true;
  }

  @Override
  public synchronized int available() throws IOException {
    checkOpen();
    return (int) Math.min(Integer.MAX_VALUE, Math.max(0, size() - pos));
  }

  @Override
  public synchronized void close() throws IOException {
    if (!closed) {
      closed = true;
      if (channel != null) {
        guard().release(channel, timeoutMillis);
        channel = null;
      }
    }
  }
}
