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
 */
final class FailoverInputStream extends FSInputStream {
  private final Path entry;
  private final List<Path> replicas;
  private final FileSystem.Statistics stats;
  private int current = -1;
  private FileChannel channel;
  /** The experiment's emulated route for the current replica (null when off). */
  private NasLink.Route route;
  private long pos;
  private boolean closed;
  /** How many times this stream moved to another replica (tests assert the failover path ran). */
  int failovers;

  FailoverInputStream(Path entry, List<Path> replicas, FileSystem.Statistics stats) throws IOException {
    this.entry = entry;
    this.replicas = replicas;
    this.stats = stats;
    openFrom(0, null);
  }

  /** Open the first replica at or after index {@code from} that opens; throw when none does. */
  private void openFrom(int from, IOException why) throws IOException {
    IOException last = why;
    for (int i = from; i < replicas.size(); i++) {
      try {
        channel = FileChannel.open(replicas.get(i), StandardOpenOption.READ);
        route = NasLink.readRoute(replicas.get(i));
        if (current >= 0 && i != current) {
          failovers++;
        }
        current = i;
        return;
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
    try {
      channel.close();
    } catch (IOException ignored) {
      // this replica has failed already
    }
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
        int n = channel.read(ByteBuffer.wrap(b, off, len), pos);
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
        return channel.size();
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
    old.close();
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
        channel.close();
      }
    }
  }
}
